-- Renew the release worker's claim on a window (stream_dp/release/claim.py): PEXPIRE only while it holds it.
-- KEYS[1]: the window's claim ; ARGV: token, ttl (milliseconds). Returns 1 renewed, 0 not the holder.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

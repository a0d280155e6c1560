-- Drop the release worker's claim on a window (stream_dp/release/claim.py): DEL only while it holds it.
-- KEYS[1]: the window's claim ; ARGV[1]: token. Returns 1 dropped, 0 not the holder.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

-- The fenced step of a sharded window's released mark (stream_dp/release/windows.py, mark_released).
-- KEYS: claim, released marker (both {w:<start>}) ; ARGV: token, retention_seconds
-- Sharded windows: the fenced step records the release; the shards are then released one by one.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], '1')
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]) + 86400) end
return 1

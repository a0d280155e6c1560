-- One key shard of a window released (layout "key", docs/design/key-sharded-counts.md), after the fenced
-- released mark (stream_dp/release/windows.py, finish_released). Preludes: window_state.
-- KEYS[1] counts, KEYS[2] applied, KEYS[3] meta of the key shard ; ARGV[1] retention_seconds
-- State "released" (count_keys.lua then counts nothing: a zombie ingest worker's late step 2 cannot change a
-- published window); counts and applied get the retention TTL (or, with retention 0, are deleted); the meta
-- keeps the released state a day longer than the counts (as the sharded window's released marker does).
redis.call('HSET', KEYS[3], 'state', WINDOW_RELEASED)
local ttl = tonumber(ARGV[1])
for _, k in ipairs({KEYS[1], KEYS[2]}) do
  if ttl > 0 then redis.call('EXPIRE', k, ttl) else redis.call('DEL', k) end
end
redis.call('EXPIRE', KEYS[3], ttl + 86400)
return 1

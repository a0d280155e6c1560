-- The alerts' sparse-vector state, compare-and-set on its window (stream_dp/release/alerts.py).
-- KEYS[1]: state key ; ARGV[1]: window start ; ARGV[2]: state JSON
local cur = redis.call('HGET', KEYS[1], 'window')
if cur and tonumber(cur) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'window', ARGV[1], 'state', ARGV[2])
return 1

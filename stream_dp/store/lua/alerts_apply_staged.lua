-- The alerts' staged state moved forward after its window's commit (stream_dp/release/alerts.py).
-- KEYS[1]: state key ; KEYS[2]: staged hash ; ARGV[1]: staged field '<window>:<ref>' ; ARGV[2]: window start
-- Copies the staged state forward (compare-and-set on the window) and deletes every staged state of this
-- window or an earlier one. Returns 1 applied, 0 stale (a later or equal window is stored), -1 missing.
local staged = redis.call('HGET', KEYS[2], ARGV[1])
local w = tonumber(ARGV[2])
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
  local fw = tonumber(string.match(f, '^(%-?%d+):'))
  if fw == nil or fw <= w then redis.call('HDEL', KEYS[2], f) end
end
if not staged then return -1 end
local cur = redis.call('HGET', KEYS[1], 'window')
if cur and tonumber(cur) >= w then return 0 end
redis.call('HSET', KEYS[1], 'window', ARGV[2], 'state', staged)
return 1

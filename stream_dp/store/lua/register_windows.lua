-- Register windows in the index before their first events are applied, unless they are already closed.
-- KEYS[1] watermarks HASH (fields: "global", "closing", partitions...)   KEYS[2] windows index ZSET
-- ARGV: start1, end1, start2, end2, ...
-- Returns one flag per window: 1 = registered (open), 0 = closed (its events are late).
-- "closing" is a global watermark being installed (see advance_watermark.lua): a window it covers may
-- not be registered any more, so every window it must close is in the index when it reads the index.
local g = tonumber(redis.call('HGET', KEYS[1], 'global') or '')
local c = tonumber(redis.call('HGET', KEYS[1], 'closing') or '')
local closed = g
if c and (not closed or c > closed) then closed = c end
local out = {}
for i = 1, #ARGV, 2 do
  if closed and tonumber(ARGV[i + 1]) <= closed then
    out[#out + 1] = 0
  else
    redis.call('ZADD', KEYS[2], 'NX', ARGV[i], ARGV[i])
    out[#out + 1] = 1
  end
end
return out

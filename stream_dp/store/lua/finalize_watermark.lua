-- Install a global watermark after every window it closes was marked closed (phase 3). Never backwards.
-- KEYS[1] watermarks HASH, KEYS[2] window-closes STREAM (Keys.window_closes).
-- ARGV[1] target, ARGV[2] window size (seconds).
-- When the watermark passes the end of a scheduled window (windows start at multiples of the size), one
-- entry is added to the stream, so that release workers blocked on it wake now rather than at their next
-- poll. Returns the global watermark now stored.
if redis.replicate_commands then redis.replicate_commands() end
local g = redis.call('HGET', KEYS[1], 'global')
if not g or tonumber(ARGV[1]) > tonumber(g) then
  redis.call('HSET', KEYS[1], 'global', ARGV[1])
  local size = tonumber(ARGV[2])
  if not g or math.floor(tonumber(ARGV[1]) / size) > math.floor(tonumber(g) / size) then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', 64, '*', 'watermark', ARGV[1])
  end
  return ARGV[1]
end
return g

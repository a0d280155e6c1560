-- Install a global watermark after every window it closes was marked closed (phase 3). Never backwards.
-- KEYS[1] watermarks HASH.  ARGV[1] target.  Returns the global watermark now stored.
local g = redis.call('HGET', KEYS[1], 'global')
if not g or tonumber(ARGV[1]) > tonumber(g) then
  redis.call('HSET', KEYS[1], 'global', ARGV[1])
  return ARGV[1]
end
return g

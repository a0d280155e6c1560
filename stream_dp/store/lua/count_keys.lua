-- Step 2 of the key layout's apply (docs/design/key-sharded-counts.md): count chunks' accepted increments
-- into one key shard of a window, each chunk at most once. Step 1 (the user shard's bounding) recorded them
-- as pending; whoever sends them here -- the ingest worker, its replay, the release worker's drain -- may
-- send an entry again: it is skipped.
--
-- KEYS[1] counts  ZSET  key -> the window's count of every key of this key shard
-- KEYS[2] applied HASH  source "<user shard>:<partition>" -> highest chunk offset counted here from it
-- KEYS[3] meta    HASH  of the key shard: state (the window_state prelude); a released key shard counts nothing
-- ARGV: entries of three arguments each: source, last offset (integer, as a string), the increments encoded
--       as the pending hash holds them: their counts (commas), NUL, their keys (NUL-separated)
--       (stream_dp/store/key_counts.py encode_increments). The entries of one source must come in offset order
--       with no pending entry of that source left out before them (the ordering rule: applied is a high-water mark).
-- Reply: {counted, skipped} entries, or {WINDOW_RELEASED, 0} when the key shard is released (nothing counted).
-- Everything is parsed and checked before the first write (a script that fails half way keeps its writes).
if #ARGV % 3 ~= 0 then
  return redis.error_reply('count_keys: ' .. #ARGV .. ' arguments, not entries of 3')
end
if redis.call('HGET', KEYS[3], 'state') == WINDOW_RELEASED then
  return {WINDOW_RELEASED, 0}
end
local entries = {}
for e = 1, #ARGV, 3 do
  local ks, cs = {}, {}
  local value = ARGV[e + 2]
  local nul = string.find(value, '%z') or (#value + 1)
  for c in string.gmatch(string.sub(value, 1, nul - 1), '%d+') do cs[#cs + 1] = c end
  for k in string.gmatch(string.sub(value, nul + 1), '[^%z]+') do ks[#ks + 1] = k end
  local offset = tonumber(ARGV[e + 1])
  if #ks ~= #cs or not offset then
    return redis.error_reply('count_keys: entry of ' .. ARGV[e] .. ' at offset ' .. ARGV[e + 1] .. ': ' .. #ks ..
      ' keys but ' .. #cs .. ' counts')
  end
  entries[#entries + 1] = {ARGV[e], offset, ARGV[e + 1], ks, cs}
end
local high, counted, skipped = {}, 0, 0
for _, entry in ipairs(entries) do
  local source, offset = entry[1], entry[2]
  if high[source] == nil then high[source] = tonumber(redis.call('HGET', KEYS[2], source) or '-1') end
  if offset > high[source] then
    local ks, cs = entry[4], entry[5]
    for j = 1, #ks do redis.call('ZINCRBY', KEYS[1], cs[j], ks[j]) end
    redis.call('HSET', KEYS[2], source, entry[3])
    high[source] = offset
    counted = counted + 1
  else
    skipped = skipped + 1
  end
end
return {counted, skipped}

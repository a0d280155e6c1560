-- A read of a closed window shard for the release worker (stream_dp/release/windows.py, counts_of).
-- KEYS[1]: window (shard) counts ; ARGV[1]: JSON array of members. Their scores as a JSON array, 0 for a
-- missing member (one argument each way: redis-py packs and parses thousands of ZMSCORE arguments slowly).
local members = cjson.decode(ARGV[1])
local out = {}
for i = 1, #members, 1000 do
  local part = {}
  for j = i, math.min(i + 999, #members) do part[#part + 1] = members[j] end
  local got = redis.call('ZMSCORE', KEYS[1], unpack(part))
  for j = 1, #part do out[#out + 1] = tonumber(got[j]) or 0 end
end
if #out == 0 then return '[]' end
return cjson.encode(out)

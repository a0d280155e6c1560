-- A read of a closed window for the release worker (stream_dp/release/windows.py, members_at).
-- KEYS[1]: window counts ; ARGV: runs of consecutive ranks (ZRANGE order) as first, last, first, last, ...
-- Returns JSON [member, score, ...], one pair per rank ('' and '-1' for a rank past the end, which the
-- caller reports as a changed window). A run costs one ZRANGE: the fully reported classes of a sample are
-- long runs.
local out = {}
for i = 1, #ARGV, 2 do
  local first, last = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local r = redis.call('ZRANGE', KEYS[1], first, last, 'WITHSCORES')
  for j = 1, #r do out[#out + 1] = r[j] end
  for _ = #r / 2 + 1, last - first + 1 do
    out[#out + 1] = ''
    out[#out + 1] = '-1'
  end
end
if #out == 0 then return '[]' end
return cjson.encode(out)

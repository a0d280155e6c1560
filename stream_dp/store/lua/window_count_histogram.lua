-- A read of a closed window for the release worker (stream_dp/release/windows.py, count_histogram).
-- KEYS[1]: window counts ; ARGV[1]: exclusive lower bound ('-inf' to start, else '(' .. score),
-- ARGV[2]: most distinct scores to return, ARGV[3]: highest score to walk to (inclusive; default '+inf').
-- Returns JSON [score, n, score, n, ...], ascending score: each step finds the next distinct score
-- (ZRANGEBYSCORE ... LIMIT 0 1) and counts its members (ZCOUNT), both O(log n), so the walk never touches
-- the members themselves.
local out = {}
local lo = ARGV[1]
local hi = ARGV[3] or '+inf'
for i = 1, tonumber(ARGV[2]) do
  local nxt = redis.call('ZRANGEBYSCORE', KEYS[1], lo, hi, 'WITHSCORES', 'LIMIT', 0, 1)
  if #nxt == 0 then break end
  local s = nxt[2]
  out[#out + 1] = s
  out[#out + 1] = redis.call('ZCOUNT', KEYS[1], s, s)
  lo = '(' .. s
end
if #out == 0 then return '[]' end
return cjson.encode(out)

-- A read of a closed window for the release worker (stream_dp/release/windows.py, top_counts).
-- KEYS[1]: window counts ; ARGV[1]: last rank, ARGV[2]: first rank (default 0). Members with scores at
-- those ranks, best first, as JSON.
local flat = redis.call('ZREVRANGE', KEYS[1], ARGV[2] or 0, ARGV[1], 'WITHSCORES')
if #flat == 0 then return '[]' end
return cjson.encode(flat)

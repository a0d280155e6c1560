-- A read of a closed window for the release worker (stream_dp/release/windows.py, all_counts).
-- KEYS[1]: window counts ; ARGV: first, last rank. Returns [member, score, member, score, ...] as JSON.
local flat = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')
if #flat == 0 then return '[]' end
return cjson.encode(flat)

-- The release worker's released_through cursor (stream_dp/release/windows.py, finish_released).
-- KEYS[1]: released_through cursor ; KEYS[2]: released index ; ARGV: schedule start, window size, max steps,
-- and optionally the start of a window to record as released first (ZADD, idempotent).
-- Moves the cursor over every consecutive released window after it. Returns the cursor (or false).
if ARGV[4] then redis.call('ZADD', KEYS[2], ARGV[4], ARGV[4]) end
local size = tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]) or '')
local nxt = cur and (cur + size) or tonumber(ARGV[1])
local moved = false
for _ = 1, tonumber(ARGV[3]) do
  if not redis.call('ZSCORE', KEYS[2], string.format('%d', nxt)) then break end
  cur, nxt, moved = nxt, nxt + size, true
end
if moved then redis.call('SET', KEYS[1], string.format('%d', cur)) end
return cur and string.format('%d', cur) or false

-- Mark a window closed (phase 2 of a watermark advance); events applied after this are late.
-- KEYS[1] meta HASH of the window.  ARGV: start, end, watermark that closes it.
-- Records closed_at (Redis clock, epoch seconds) for the release worker's latency figures.
-- A window the release worker already marked "released" keeps that state (the states: the window_state
-- prelude, stream_dp/store/window_state.py).
if redis.replicate_commands then redis.replicate_commands() end
local state = redis.call('HGET', KEYS[1], 'state')
if state == WINDOW_RELEASED or state == WINDOW_CLOSED then return 0 end
local t = redis.call('TIME')
local closed_at = string.format('%d.%06d', tonumber(t[1]), tonumber(t[2]))
redis.call('HSET', KEYS[1], 'start', ARGV[1], 'end', ARGV[2], 'state', WINDOW_CLOSED, 'closed_at_watermark', ARGV[3],
           'closed_at', closed_at)
redis.call('HSETNX', KEYS[1], 'events_applied', 0)
return 1

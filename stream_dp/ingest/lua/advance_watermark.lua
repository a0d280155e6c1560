-- Record this worker's partition reports and compute the next global watermark (phase 1 of 2).
-- KEYS[1] watermarks HASH: "<partition>" -> watermark (max record time - allowed lateness),
--         "seen:<p>" -> last time the partition was busy or behind (Redis clock, seconds),
--         "own:<p>"  -> last time an owner reported it, "cu:<p>" -> 1 if it was caught up then,
--         "global", "closing"
-- KEYS[2] windows index ZSET (member/score = window start)
-- KEYS[3] (optional) ingest epoch marker: when given and gone, Redis lost ingest's state (stream_dp/state_epochs.py):
--         the script refuses with INGEST_STATE_LOST and writes nothing
-- ARGV: now ("" = Redis TIME), idle_timeout, window_size, n_known, known partitions...,
--       then (partition, watermark ("" = none yet), busy 0|1, caught_up 0|1) of the partitions this
--       worker owns. caught_up: its position has reached the broker's high-water mark.
-- A partition is idle only when an owner reported it caught up within idle_timeout and it has been
-- quiet for idle_timeout. Any other partition -- busy, behind, or without a live owner (its worker died
-- and nobody took it over yet) -- is active: it holds the global back at its watermark, or entirely
-- while it has none. So the watermark never passes records nobody has read.
-- Returns {target, global, windows_open, start...}: if target ~= global the caller must close the listed
-- windows (end in (global, target]) and then call finalize_watermark.lua with target.
if redis.replicate_commands then redis.replicate_commands() end
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 0 then
  return redis.error_reply('INGEST_STATE_LOST the marker ' .. KEYS[3] .. ' is gone from Redis')
end
local wm = KEYS[1]
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[1])
end
local nows = string.format('%.6f', now)
local idle, size = tonumber(ARGV[2]), tonumber(ARGV[3])
local n_known = tonumber(ARGV[4])
for i = 5, 4 + n_known do
  redis.call('HSETNX', wm, 'seen:' .. ARGV[i], nows)
end
for i = 5 + n_known, #ARGV, 4 do
  local p, w, busy, cu = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if w ~= '' then
    local cur = tonumber(redis.call('HGET', wm, p) or '')
    if not cur or tonumber(w) > cur then redis.call('HSET', wm, p, w) end
  end
  if busy == '1' or cu ~= '1' then redis.call('HSET', wm, 'seen:' .. p, nows) else redis.call('HSETNX', wm, 'seen:' .. p, nows) end
  redis.call('HSET', wm, 'own:' .. p, nows, 'cu:' .. p, cu)
end

-- candidate = min over active partitions; the max when all are idle; none while an active one has no watermark
local flat = redis.call('HGETALL', wm)
local marks, seen, own, cu = {}, {}, {}, {}
for i = 1, #flat, 2 do
  local f = flat[i]
  if string.sub(f, 1, 5) == 'seen:' then seen[string.sub(f, 6)] = tonumber(flat[i + 1])
  elseif string.sub(f, 1, 4) == 'own:' then own[string.sub(f, 5)] = tonumber(flat[i + 1])
  elseif string.sub(f, 1, 3) == 'cu:' then cu[string.sub(f, 4)] = flat[i + 1]
  elseif string.match(f, '^%d+$') then marks[f] = flat[i + 1] end
end
local cand, cand_n, blocked, any_active = nil, nil, false, false
for p, s in pairs(seen) do
  local is_idle = own[p] and now - own[p] <= idle and cu[p] == '1' and now - s > idle
  if not is_idle then
    any_active = true
    local w = marks[p]
    if not w then blocked = true
    elseif not cand_n or tonumber(w) < cand_n then cand, cand_n = w, tonumber(w) end
  end
end
if not any_active then
  for _, w in pairs(marks) do
    if not cand_n or tonumber(w) > cand_n then cand, cand_n = w, tonumber(w) end
  end
end
if blocked then cand, cand_n = nil, nil end

local g = redis.call('HGET', wm, 'global')
local c = redis.call('HGET', wm, 'closing')
local target = g
if c and (not target or tonumber(c) > tonumber(target)) then target = c end
if cand and (not target or cand_n > tonumber(target)) then target = cand end
local out = {target or '', g or ''}
local open_from = g and ('(' .. string.format('%.17g', tonumber(g) - size)) or '-inf'
out[3] = redis.call('ZCOUNT', KEYS[2], open_from, '+inf')
if target and target ~= g then
  redis.call('HSET', wm, 'closing', target)
  local closing = redis.call('ZRANGEBYSCORE', KEYS[2], open_from, string.format('%.17g', tonumber(target) - size))
  for _, s in ipairs(closing) do out[#out + 1] = s end
end
return out

-- Record this worker's partition watermarks and compute the next global watermark (phase 1 of 2).
-- KEYS[1] watermarks HASH: "<partition>" -> watermark, "seen:<partition>" -> last time the partition was
--         reported busy (Redis clock, seconds), "global", "closing"
-- KEYS[2] windows index ZSET (member/score = window start)
-- ARGV: now ("" = Redis TIME), idle_timeout, window_size, n_known, known partitions...,
--       then (partition, watermark ("" = none yet), busy 0|1) triples of the partitions this worker owns.
-- A partition known to the topic but never seen starts its idle clock now (it holds the global back
-- until it has a watermark or turns idle).
-- Returns {target, global, windows_open, start...}: if target ~= global the caller must close the listed
-- windows (end in (global, target]) and then call finalize_watermark.lua with target.
if redis.replicate_commands then redis.replicate_commands() end
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
for i = 5 + n_known, #ARGV, 3 do
  local p, w, busy = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if w ~= '' then
    local cur = tonumber(redis.call('HGET', wm, p) or '')
    if not cur or tonumber(w) > cur then redis.call('HSET', wm, p, w) end
  end
  if busy == '1' then redis.call('HSET', wm, 'seen:' .. p, nows) else redis.call('HSETNX', wm, 'seen:' .. p, nows) end
end

-- candidate = min over active partitions; the max when all are idle; none while an active one has no watermark
local flat = redis.call('HGETALL', wm)
local marks, seen = {}, {}
for i = 1, #flat, 2 do
  local f = flat[i]
  if string.sub(f, 1, 5) == 'seen:' then seen[string.sub(f, 6)] = tonumber(flat[i + 1])
  elseif string.match(f, '^%d+$') then marks[f] = flat[i + 1] end
end
local cand, cand_n, blocked, any_active = nil, nil, false, false
for p, s in pairs(seen) do
  if now - s <= idle then
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

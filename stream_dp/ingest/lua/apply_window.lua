-- Apply one (window, partition) chunk of an ingest batch atomically: contribution bounding, counts,
-- window metadata and the partition's applied-offset record. All keys share the window's hash tag.
--
-- KEYS[1] counts  ZSET  key -> distinct bounded users (or events, unit "event")
-- KEYS[2] users   HASH  user -> the user's counted keys, NUL-separated, in first-seen order
-- KEYS[3] offsets HASH  partition -> highest offset applied to this window
-- KEYS[4] meta    HASH  start, end, state (open|closed|released), events_applied, events_bounded
-- ARGV: start, end, partition, unit ("user"|"event"), max_keys_per_user, closed_through,
--       then (offset, user, key) triples in increasing offset order, all of that partition.
-- closed_through: the caller's view of the global watermark (the window is late when end <= it).
-- Returns {applied, duplicate (offset already applied), linf, l0, late}.
local counts, users, offsets, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local w_start, w_end, partition = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local per_user = ARGV[4] == 'user'
local max_keys = tonumber(ARGV[5])
local n = (#ARGV - 6) / 3

local last = tonumber(redis.call('HGET', offsets, partition) or '-1')
local state = redis.call('HGET', meta, 'state')
if state == 'closed' or state == 'released' or w_end <= tonumber(ARGV[6]) then
  -- closed: nothing changes; events applied before (a replay) are duplicates, the others are late
  local dup = 0
  for i = 7, #ARGV, 3 do
    if tonumber(ARGV[i]) <= last then dup = dup + 1 end
  end
  return {0, dup, 0, 0, n - dup}
end

local top = last
local applied, dup, linf, l0 = 0, 0, 0, 0
local SEP = '\0'
for i = 7, #ARGV, 3 do
  local off = tonumber(ARGV[i])
  if off <= last then
    dup = dup + 1
  else
    if off > top then top = off end
    local user, key = ARGV[i + 1], ARGV[i + 2]
    if per_user then
      local seen = redis.call('HGET', users, user)
      if not seen then
        redis.call('HSET', users, user, key)
        redis.call('ZINCRBY', counts, 1, key)
        applied = applied + 1
      elseif string.find(SEP .. seen .. SEP, SEP .. key .. SEP, 1, true) then
        linf = linf + 1
      else
        local _, seps = string.gsub(seen, '%z', '')  -- Lua 5.1 patterns spell NUL as %z
        if seps + 1 >= max_keys then
          l0 = l0 + 1
        else
          redis.call('HSET', users, user, seen .. SEP .. key)
          redis.call('ZINCRBY', counts, 1, key)
          applied = applied + 1
        end
      end
    else
      redis.call('ZINCRBY', counts, 1, key)
      applied = applied + 1
    end
  end
end

if top > last then
  redis.call('HSET', offsets, partition, string.format('%d', top))
end
if not state then
  redis.call('HSET', meta, 'start', w_start, 'end', ARGV[2], 'state', 'open')
end
if applied > 0 then
  redis.call('HINCRBY', meta, 'events_applied', applied)
else
  redis.call('HSETNX', meta, 'events_applied', 0)
end
if linf + l0 > 0 then
  redis.call('HINCRBY', meta, 'events_bounded', linf + l0)
end
return {applied, dup, linf, l0, 0}

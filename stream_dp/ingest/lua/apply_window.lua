-- Apply one (window, partition) chunk of an ingest batch atomically: contribution bounding, counts,
-- window metadata and the partition's applied-offset record. All keys share the window's hash tag.
--
-- KEYS[1] counts  ZSET  key -> distinct bounded users (or events, unit "event")
-- KEYS[2] users   HASH  user -> the user's counted keys, NUL-separated, in first-seen order
-- KEYS[3] offsets HASH  partition -> highest offset applied to this window
-- KEYS[4] meta    HASH  start, end, state (open|closed|released), events_applied, events_bounded
-- ARGV: start, end, partition, unit ("user"|"event"), max_keys_per_user, closed_through, events
-- events: "offset NUL user NUL key NUL offset NUL user NUL key ..." in increasing offset order, all of that
-- partition (users and keys never contain NUL: the decoder rejects them). One string instead of three
-- arguments per event keeps the client's argument packing cheap.
-- closed_through: the caller's view of the global watermark (the window is late when end <= it).
-- Returns {applied, duplicate (offset already applied), linf, l0, late}.
local counts, users, offsets, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local w_start, w_end, partition = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local per_user = ARGV[4] == 'user'
local max_keys = tonumber(ARGV[5])
local packed = ARGV[7]
local SEP = '\0'

-- split the packed events into parallel arrays
local offs, us, ks = {}, {}, {}
local pos, n, len = 1, 0, #packed
while pos <= len do
  local a = string.find(packed, SEP, pos, true)
  local b = string.find(packed, SEP, a + 1, true)
  local c = string.find(packed, SEP, b + 1, true) or (len + 1)
  n = n + 1
  offs[n] = tonumber(string.sub(packed, pos, a - 1))
  us[n] = string.sub(packed, a + 1, b - 1)
  ks[n] = string.sub(packed, b + 1, c - 1)
  pos = c + 1
end

local last = tonumber(redis.call('HGET', offsets, partition) or '-1')
local state = redis.call('HGET', meta, 'state')
if state == 'closed' or state == 'released' or w_end <= tonumber(ARGV[6]) then
  -- closed: nothing changes; events applied before (a replay) are duplicates, the others are late
  local dup = 0
  for i = 1, n do
    if offs[i] <= last then dup = dup + 1 end
  end
  return {0, dup, 0, 0, n - dup}
end

local top = last
local applied, dup, linf, l0 = 0, 0, 0, 0
local incr = {}
for i = 1, n do
  local off = offs[i]
  if off <= last then
    dup = dup + 1
  else
    if off > top then top = off end
    local user, key = us[i], ks[i]
    local counted = false
    if per_user then
      local seen = redis.call('HGET', users, user)
      if not seen then
        redis.call('HSET', users, user, key)
        counted = true
      elseif string.find(SEP .. seen .. SEP, SEP .. key .. SEP, 1, true) then
        linf = linf + 1
      else
        local _, seps = string.gsub(seen, '%z', '')  -- Lua 5.1 patterns spell NUL as %z
        if seps + 1 >= max_keys then
          l0 = l0 + 1
        else
          redis.call('HSET', users, user, seen .. SEP .. key)
          counted = true
        end
      end
    else
      counted = true
    end
    if counted then
      incr[key] = (incr[key] or 0) + 1
      applied = applied + 1
    end
  end
end

for key, by in pairs(incr) do
  redis.call('ZINCRBY', counts, by, key)
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

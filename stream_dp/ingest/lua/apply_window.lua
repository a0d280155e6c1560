-- Apply one (window, partition) chunk of an ingest batch atomically: contribution bounding, counts,
-- window metadata and the partition's applied-offset record. All keys share the window's hash tag.
--
-- KEYS[1] counts  ZSET  key -> distinct bounded users (or events, unit "event")
-- KEYS[2] users   HASH  user -> the user's counted keys, NUL-separated, in first-seen order
-- KEYS[3] offsets HASH  partition -> highest offset applied to this window
-- KEYS[4] meta    HASH  start, end, state (open|closed|released), events_applied, events_bounded
-- ARGV: start, end, partition, unit ("user"|"event"), max_keys_per_user, closed_through,
--       offsets, users, keys
-- offsets: "o1,o2,..." strictly increasing, all of that partition; users and keys: the events' users
-- and keys in the same order, NUL-separated (the decoder rejects empty strings and NUL, so the split is
-- unambiguous). Three strings instead of three arguments per event keep the client's packing to three
-- C-level joins.
-- closed_through: the caller's view of the global watermark (the window is late when end <= it).
-- Returns {applied, duplicate (offset already applied), linf, l0, late}.
--
-- Bounding is evaluated event by event in offset order, exactly as stream_dp.ingest.bounding states it.
local counts, users, offsets, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local w_start, w_end, partition = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local per_user = ARGV[4] == 'user'
local max_keys = tonumber(ARGV[5])
local SEP = '\0'

-- whether the NUL-separated list `seen` holds `key`, and how many keys it holds (without building strings)
local function has_key(seen, key)
  local pos, len = 1, #seen
  while true do
    local s, e = string.find(seen, key, pos, true)
    if not s then return false end
    if (s == 1 or string.byte(seen, s - 1) == 0) and (e == len or string.byte(seen, e + 1) == 0) then
      return true
    end
    pos = s + 1
  end
end

local function count_keys(seen)
  local n, pos = 1, 1
  while true do
    local s = string.find(seen, SEP, pos, true)
    if not s then return n end
    n, pos = n + 1, s + 1
  end
end

local offs, us, ks = {}, {}, {}
local n = 0
for o in string.gmatch(ARGV[7], '%d+') do
  n = n + 1
  offs[n] = tonumber(o)
  if n > 1 and offs[n] <= offs[n - 1] then
    return redis.error_reply('apply_window: offsets must increase within a chunk (' .. o .. ' after ' ..
      string.format('%d', offs[n - 1]) .. ')')
  end
end
local i = 0
for u in string.gmatch(ARGV[8], '[^%z]+') do
  i = i + 1
  us[i] = u
end
local j = 0
for k in string.gmatch(ARGV[9], '[^%z]+') do
  j = j + 1
  ks[j] = k
end
if i ~= n or j ~= n then
  return redis.error_reply('apply_window: ' .. n .. ' offsets, ' .. i .. ' users, ' .. j .. ' keys')
end

local last = tonumber(redis.call('HGET', offsets, partition) or '-1')
-- offsets increase within a chunk, so the events applied before (a replay) are a prefix
local first = 1
while first <= n and offs[first] <= last do first = first + 1 end
local dup = first - 1

local state = redis.call('HGET', meta, 'state')
if state == 'closed' or state == 'released' or w_end <= tonumber(ARGV[6]) then
  -- closed: nothing changes; events applied before (a replay) are duplicates, the others are late
  return {0, dup, 0, 0, n - dup}
end

local applied, linf, l0 = 0, 0, 0
local incr = {}
for e = first, n do
  local key = ks[e]
  local counted = true
  if per_user then
    local user = us[e]
    local seen = redis.call('HGET', users, user)
    if not seen then
      redis.call('HSET', users, user, key)
    elseif has_key(seen, key) then
      linf = linf + 1
      counted = false
    elseif count_keys(seen) >= max_keys then
      l0 = l0 + 1
      counted = false
    else
      redis.call('HSET', users, user, seen .. SEP .. key)
    end
  end
  if counted then
    incr[key] = (incr[key] or 0) + 1
    applied = applied + 1
  end
end

for key, by in pairs(incr) do
  redis.call('ZINCRBY', counts, by, key)
end

if n > dup and offs[n] > last then
  redis.call('HSET', offsets, partition, string.format('%d', offs[n]))
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

-- Record one (window, partition) chunk that the worker has bounded (stream_dp.ingest.bounding, ChunkPlan)
-- on its cache of the window's bounding state: the counted (user, key) pairs, the count increments, the
-- metadata and the partition's applied-offset record change together or not at all.
--
-- KEYS[1] counts  ZSET   key -> distinct bounded users (or events, unit "event")
-- KEYS[2] users   STRING bounding log: the counted pairs "user\0key\0" in apply order (append only)
-- KEYS[3] offsets HASH   partition -> highest offset applied to this window
-- KEYS[4] meta    HASH   start, end, state (open|closed|released), events_applied, events_bounded, apply_token
-- ARGV: start, end, partition, closed_through, token_before, token, log_bytes_before, last_offset,
--       applied, bounded, log, increment keys (NUL-separated), increment counts (comma-separated),
--       [most log bytes to return in a stale reply; absent or 0 = all]
-- closed_through: the caller's view of the global watermark (the window is late when end <= it).
--
-- The plan is valid only for the state it was made on: apply_token names that state, every apply
-- replaces it, and a plan made on any other state (or on a log of another length) is refused. Replies:
--   {"ok"}                                   recorded
--   {"late", applied offset | "-1"}          the window is closed: nothing recorded
--   {"stale", apply_token, from, log[from:from+max], offsets (flat HGETALL), log length}
--                                            the state moved on (another writer, or an outcome the caller
--                                            never saw): nothing recorded; the caller absorbs what changed
--                                            (from = log_bytes_before, or 0 if the log is shorter), reading
--                                            the rest of the log up to "log length" in chunks, and plans again
local counts, users, offsets, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local partition = ARGV[3]

local last = redis.call('HGET', offsets, partition)
local state = redis.call('HGET', meta, 'state')
if state == 'closed' or state == 'released' or tonumber(ARGV[2]) <= tonumber(ARGV[4]) then
  return {'late', last or '-1'}
end

local token = redis.call('HGET', meta, 'apply_token') or ''
local len = redis.call('STRLEN', users)
local from = tonumber(ARGV[7])
if token ~= ARGV[5] or len ~= from then
  if len < from then from = 0 end
  local tail = ''
  local upto = len
  local most = tonumber(ARGV[14] or '0') or 0
  if most > 0 and upto > from + most then upto = from + most end
  if upto > from then tail = redis.call('GETRANGE', users, from, upto - 1) end
  return {'stale', token, from, tail, redis.call('HGETALL', offsets), len}
end
if last and tonumber(ARGV[8]) <= tonumber(last) then
  -- same token, yet the plan's offsets are already applied: the caller's cache is broken, not stale
  return redis.error_reply('apply_window: plan up to offset ' .. ARGV[8] .. ' of partition ' .. partition ..
    ' but ' .. last .. ' is already applied under the same apply_token')
end

-- parse and check everything before the first write: a script that fails half way keeps its writes
local ks, cs, n, i = {}, {}, 0, 0
for k in string.gmatch(ARGV[12], '[^%z]+') do
  n = n + 1
  ks[n] = k
end
for c in string.gmatch(ARGV[13], '%d+') do
  i = i + 1
  cs[i] = c
end
if i ~= n then
  return redis.error_reply('apply_window: ' .. n .. ' increment keys but ' .. i .. ' counts')
end

if ARGV[11] ~= '' then
  redis.call('APPEND', users, ARGV[11])
end
for j = 1, n do
  redis.call('ZINCRBY', counts, cs[j], ks[j])
end
redis.call('HSET', offsets, partition, ARGV[8])
if not state then
  redis.call('HSET', meta, 'start', ARGV[1], 'end', ARGV[2], 'state', 'open', 'apply_token', ARGV[6])
else
  redis.call('HSET', meta, 'apply_token', ARGV[6])
end
redis.call('HINCRBY', meta, 'events_applied', tonumber(ARGV[9]))
if ARGV[10] ~= '0' then
  redis.call('HINCRBY', meta, 'events_bounded', tonumber(ARGV[10]))
end
return {'ok'}

-- Record one (window, shard, partition) chunk that the worker has bounded (stream_dp.ingest.bounding,
-- ChunkPlan) on its cache of the shard's bounding state: the counted (user, key) pairs, the count
-- increments, the metadata and the partition's applied-offset record change together or not at all.
--
-- KEYS[1] counts  ZSET   key -> distinct bounded users of this shard (or events, unit "event")
-- KEYS[2] users   STRING first segment of the bounding log: counted pairs "user\0key\0" in apply order
--                 (append only). The log is the concatenation of segments KEYS[2], KEYS[2]..':1', ':2', ...
--                 each exactly log_segment_bytes long but the last, so no Redis value outgrows that size.
-- KEYS[3] offsets HASH   partition -> highest offset applied to this window shard
-- KEYS[4] meta    HASH   start, end, state (open|closed|released), events_applied, events_bounded,
--                        events_full, apply_token, log_bytes, log_segment_bytes, and per partition p that had
--                        a chunk refused as full, full:<p> = "lo:hi,lo:hi,..." (the offsets in (lo, hi] of
--                        this window shard were refused; a replay reports them as full again)
--                 (states: the window_state prelude, stream_dp/store/window_state.py)
-- ARGV[1] the header, JSON (stream_dp.ingest.chunks.ApplyHeader; "v" = 1):
--   start, end, partition, closed_through (string; the caller's view of the global watermark, the window is
--   late when end <= it), known_late (the caller already knows the window closed), token_before, token,
--   log_bytes_before, last_offset, applied, bounded,
--   most (most log bytes to return in a stale reply; 0 = all), segment_bytes (used when the shard has
--   none recorded yet), capacity (most log bytes this shard may hold)
-- ARGV[2] the log record to append; ARGV[3] increment keys (NUL-separated); ARGV[4] their counts (commas)
--
-- Layout "key" (header pending = true; docs/design/key-sharded-counts.md, step 1 of the two-step apply):
-- KEYS[5] pending HASH  "<partition>:<last_offset>:<key shard>" -> the chunk's accepted increments for that
--                       key shard (encoded as count_keys.lua takes it; opaque here). ARGV[3] and ARGV[4] are
--                       empty and ARGV[5..] are
--                       (field, value) pairs written to pending instead of counting into KEYS[1]; the reply
--                       {"ok", flat pending of this partition} names every *older* entry of the partition
--                       still pending (not yet known counted; normally none), for step 2 to send before this
--                       chunk's (the caller has this chunk's own).
--
-- The plan is valid only for the state it was made on: apply_token names that state, every apply
-- replaces it, and a plan made on any other state (or on a log of another length) is refused. Replies:
--   {"ok"}                                   recorded
--   {"late", applied offset | "-1"}          the window is closed: nothing recorded
--   {"full", log length}                     the shard would pass its capacity: the chunk's events are NOT
--                                            counted, but its offsets are recorded (a replay does not count
--                                            them: no stuck loop) under the plan's token, and in full:<p>
--                                            (a replay reports them as full again); events_full counts them
--   {"stale", apply_token, from, log[from:from+most], offsets (flat HGETALL), log length, segment bytes}
--                                            the state moved on (another writer, or an outcome the caller
--                                            never saw): nothing recorded; the caller absorbs what changed
--                                            (from = log_bytes_before, or 0 if the log is shorter), reading
--                                            the rest of the log up to "log length" in chunks, and plans again
local counts, users, offsets, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = cjson.decode(ARGV[1])
if h.v ~= 1 then
  return redis.error_reply('apply_window: header version ' .. tostring(h.v) .. ', this script reads 1')
end
local partition = tostring(h.partition)

local last = redis.call('HGET', offsets, partition)
local state = redis.call('HGET', meta, 'state')
if h.known_late or state == WINDOW_CLOSED or state == WINDOW_RELEASED or tonumber(h['end']) <= tonumber(h.closed_through) then
  return {'late', last or '-1'}
end

local token = redis.call('HGET', meta, 'apply_token') or ''
local len = tonumber(redis.call('HGET', meta, 'log_bytes') or '') or redis.call('STRLEN', users)
local seg = tonumber(redis.call('HGET', meta, 'log_segment_bytes') or '')
if not seg then seg = math.max(tonumber(h.segment_bytes), len) end  -- a log written before segments: one segment

local function segment(i)
  if i == 0 then return users end
  return users .. ':' .. string.format('%d', i)
end

local from = tonumber(h.log_bytes_before)
if token ~= h.token_before or len ~= from then
  if len < from then from = 0 end
  local upto = len
  local most = tonumber(h.most) or 0
  if most > 0 and upto > from + most then upto = from + most end
  local parts, at = {}, from
  while at < upto do
    local i = math.floor(at / seg)
    local stop = math.min(upto, (i + 1) * seg)
    parts[#parts + 1] = redis.call('GETRANGE', segment(i), at - i * seg, stop - i * seg - 1)
    at = stop
  end
  return {'stale', token, from, table.concat(parts), redis.call('HGETALL', offsets), len, seg}
end
if last and tonumber(h.last_offset) <= tonumber(last) then
  -- same token, yet the plan's offsets are already applied: the caller's cache is broken, not stale
  return redis.error_reply('apply_window: plan up to offset ' .. h.last_offset .. ' of partition ' .. partition ..
    ' but ' .. last .. ' is already applied under the same apply_token')
end

local function set_meta()
  if not state then
    redis.call('HSET', meta, 'start', h.start, 'end', h['end'], 'state', WINDOW_OPEN)
  end
  redis.call('HSET', meta, 'apply_token', h.token, 'log_bytes', string.format('%d', len),
             'log_segment_bytes', string.format('%d', seg))
end

local log = ARGV[2]
if len + #log > tonumber(h.capacity) then
  -- remember which offsets were refused, (applied offset before, last_offset], so that a replay of them (the
  -- batch retried, or replayed after a crash, before their dead letters were written) reports them as full
  -- again instead of skipping them as applied; a range that continues the last one extends it
  local field, lo, hi = 'full:' .. partition, last or '-1', tostring(h.last_offset)
  local ranges = redis.call('HGET', meta, field)
  if ranges and string.sub(ranges, -(#lo + 1)) == ':' .. lo then
    ranges = string.sub(ranges, 1, #ranges - #lo) .. hi
  elseif ranges then
    ranges = ranges .. ',' .. lo .. ':' .. hi
  else
    ranges = lo .. ':' .. hi
  end
  redis.call('HSET', meta, field, ranges)
  redis.call('HSET', offsets, partition, h.last_offset)
  set_meta()
  redis.call('HINCRBY', meta, 'events_full', tonumber(h.applied) + tonumber(h.bounded))
  return {'full', len}
end

-- parse and check everything before the first write: a script that fails half way keeps its writes
local ks, cs, n, i = {}, {}, 0, 0
for k in string.gmatch(ARGV[3], '[^%z]+') do
  n = n + 1
  ks[n] = k
end
for c in string.gmatch(ARGV[4], '%d+') do
  i = i + 1
  cs[i] = c
end
if i ~= n then
  return redis.error_reply('apply_window: ' .. n .. ' increment keys but ' .. i .. ' counts')
end

local pos = 1
while pos <= #log do
  local s = math.floor(len / seg)
  local room = (s + 1) * seg - len
  local piece = string.sub(log, pos, pos + room - 1)
  redis.call('APPEND', segment(s), piece)
  len = len + #piece
  pos = pos + #piece
end
if h.pending then
  for e = 5, #ARGV - 1, 2 do
    redis.call('HSET', KEYS[5], ARGV[e], ARGV[e + 1])
  end
else
  for j = 1, n do
    redis.call('ZINCRBY', counts, cs[j], ks[j])
  end
end
redis.call('HSET', offsets, partition, h.last_offset)
set_meta()
redis.call('HINCRBY', meta, 'events_applied', tonumber(h.applied))
if tonumber(h.bounded) ~= 0 then
  redis.call('HINCRBY', meta, 'events_bounded', tonumber(h.bounded))
end
if h.pending then
  local flat, out, prefix, own = redis.call('HGETALL', KEYS[5]), {}, partition .. ':', {}
  for e = 5, #ARGV - 1, 2 do own[ARGV[e]] = true end
  for x = 1, #flat, 2 do
    if not own[flat[x]] and string.sub(flat[x], 1, #prefix) == prefix then
      out[#out + 1] = flat[x]
      out[#out + 1] = flat[x + 1]
    end
  end
  return {'ok', out}
end
return {'ok'}

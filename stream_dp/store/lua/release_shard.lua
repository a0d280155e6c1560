-- Prelude (stream_dp/store/scripts.py): release_shard(meta, others, ttl), after the window_state prelude.
-- others: counts, users (first log segment), offsets of one window shard ; ttl: retention_seconds
-- State "released"; the bounding log (every segment) is deleted -- a closed window's log is never read
-- again: the apply script answers a closed window from meta and offsets -- and the other keys get the
-- retention TTL (or, with retention 0, are deleted).
local function release_shard(meta, others, ttl)
  redis.call('HSET', meta, 'state', WINDOW_RELEASED)
  local len = tonumber(redis.call('HGET', meta, 'log_bytes') or '') or 0
  local seg = tonumber(redis.call('HGET', meta, 'log_segment_bytes') or '') or 0
  redis.call('DEL', others[2])
  if seg > 0 then
    for i = 1, math.ceil(len / seg) - 1 do redis.call('DEL', others[2] .. ':' .. string.format('%d', i)) end
  end
  for _, k in ipairs({meta, others[1], others[3]}) do
    if ttl > 0 then redis.call('EXPIRE', k, ttl) else redis.call('DEL', k) end
  end
end

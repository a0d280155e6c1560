-- settle: ARGV[4] reservation_id, ARGV[5] release_id, ARGV[6..10] actual cost, ARGV[11] events JSON,
--         ARGV[12] now, ARGV[13] has_payload, ARGV[14] payload
-- Replaces the hold by the actual cost (cap-checked against everything else), atomically.
local rid, release_id = ARGV[4], ARGV[5]
local dup = duplicate_charge(release_id)
if dup then return dup end
if redis.call('HEXISTS', KEYS[6], rid) == 0 then
  local settled_as = redis.call('HGET', KEYS[8], rid)
  if settled_as then
    dup = duplicate_charge(settled_as)
    if dup then return dup end
  end
  return {0, result_json(false, 'unknown_reservation', with_reservations(committed(), nil)), false}
end
local c = cost_from_argv(6)
local reason = decide(add(with_reservations(committed(), rid), c))
if reason ~= 'ok' then
  return {0, result_json(false, reason, with_reservations(committed(), nil)), false}
end
redis.call('HDEL', KEYS[6], rid)
redis.call('HSET', KEYS[8], rid, release_id)
local result = commit(release_id, rid, c, ARGV[11], ARGV[12], ARGV[13], ARGV[14], 'settle')
return {0, result, redis.call('HGET', KEYS[4], release_id)}

-- settle: ARGS.reservation_id, ARGS.release_id, ARGS.cost (the actual cost), ARGS.events, ARGS.now;
--         ARGV[2] the payload (optional)
-- Replaces the hold by the actual cost (cap-checked against everything else), atomically.
local rid, release_id = ARGS.reservation_id, ARGS.release_id
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
local c = args_cost()
local reason = decide(add(with_reservations(committed(), rid), c))
if reason ~= 'ok' then
  return {0, result_json(false, reason, with_reservations(committed(), nil)), false}
end
redis.call('HDEL', KEYS[6], rid)
redis.call('HSET', KEYS[8], rid, release_id)
local result = commit(release_id, rid, c, 'settle')
return {0, result, redis.call('HGET', KEYS[4], release_id)}

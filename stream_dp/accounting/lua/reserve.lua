-- reserve: ARGS.reservation_id, ARGS.cost (the maximum), ARGS.events, ARGS.now
-- returns {duplicate (0/1), result JSON, payload of the settled release or false}
local rid = ARGS.reservation_id
local settled_as = redis.call('HGET', KEYS[8], rid)
if settled_as then
  local dup = duplicate_charge(settled_as)
  if dup then return dup end
end
-- an id already charged as a release (e.g. a status record): that charge, and no hold that nothing would settle
local charged = duplicate_charge(rid)
if charged then return charged end
local first = redis.call('HGET', KEYS[7], rid)
if first and redis.call('HEXISTS', KEYS[6], rid) == 1 then
  return {1, first, false}
end
local c = args_cost()
local reason = decide(add(with_reservations(committed(), nil), c))
if reason ~= 'ok' then
  return {0, result_json(false, reason, with_reservations(committed(), nil)), false}
end
store_cap()
redis.call('HSET', KEYS[6], rid, encode_cost(c))
log_entry('reserve', rid, rid, c, ARGS.events, ARGS.now)
local result = result_json(true, 'ok', with_reservations(committed(), nil))
redis.call('HSET', KEYS[7], rid, result)
return {0, result, false}

-- charge: ARGS.release_id, ARGS.cost, ARGS.events, ARGS.now; ARGV[2] the payload (optional)
-- returns {duplicate (0/1), result JSON, stored payload or false}; drops an open hold of the same id
local release_id = ARGS.release_id
local dup = duplicate_charge(release_id)
if dup then return dup end
local c = args_cost()
local reason = decide(add(with_reservations(committed(), nil), c))
if reason ~= 'ok' then
  return {0, result_json(false, reason, with_reservations(committed(), nil)), false}
end
-- an open hold under the same id is dropped: once the id is charged, nothing else can be published under it
-- (a settle returns this charge), and a hold never settled would count against the cap for good
local hold = redis.call('HGET', KEYS[6], release_id)
if hold then
  redis.call('HDEL', KEYS[6], release_id)
  redis.call('HDEL', KEYS[7], release_id)
  log_entry('cancel', release_id, release_id, decode_cost(hold), '[]', ARGS.now)
end
local result = commit(release_id, '', c, 'charge')
return {0, result, redis.call('HGET', KEYS[4], release_id)}

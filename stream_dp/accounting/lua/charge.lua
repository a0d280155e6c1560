-- charge: ARGS.release_id, ARGS.cost, ARGS.events, ARGS.now; ARGV[2] the payload (optional)
-- returns {duplicate (0/1), result JSON, stored payload or false}
local release_id = ARGS.release_id
local dup = duplicate_charge(release_id)
if dup then return dup end
local c = args_cost()
local reason = decide(add(with_reservations(committed(), nil), c))
if reason ~= 'ok' then
  return {0, result_json(false, reason, with_reservations(committed(), nil)), false}
end
local result = commit(release_id, '', c, 'charge')
return {0, result, redis.call('HGET', KEYS[4], release_id)}

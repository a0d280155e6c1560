-- charge: ARGV[4] release_id, ARGV[5..9] cost, ARGV[10] events JSON, ARGV[11] now,
--         ARGV[12] has_payload ('1'/'0'), ARGV[13] payload
-- returns {duplicate (0/1), result JSON, stored payload or false}
local release_id = ARGV[4]
local dup = duplicate_charge(release_id)
if dup then return dup end
local c = cost_from_argv(5)
local reason = decide(add(with_reservations(committed(), nil), c))
if reason ~= 'ok' then
  return {0, result_json(false, reason, with_reservations(committed(), nil)), false}
end
local result = commit(release_id, '', c, ARGV[10], ARGV[11], ARGV[12], ARGV[13], 'charge')
return {0, result, redis.call('HGET', KEYS[4], release_id)}

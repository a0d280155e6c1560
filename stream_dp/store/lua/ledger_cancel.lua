-- cancel: ARGS.reservation_id, ARGS.now. Drops an open hold whose mechanism output never left the
-- process (e.g. the lifetime hold of a release the period scope refused). Returns 1 if a hold was dropped.
local rid = ARGS.reservation_id
local hold = redis.call('HGET', KEYS[6], rid)
if not hold then return 0 end
redis.call('HDEL', KEYS[6], rid)
redis.call('HDEL', KEYS[7], rid)
log_entry('cancel', rid, rid, decode_cost(hold), '[]', ARGS.now)
return 1

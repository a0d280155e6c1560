-- restore: ARGS.release_id, ARGS.cost, ARGS.events, ARGS.now, optionally ARGS.block (the budget block the release
-- was published with, JSON); ARGV[2] the stored record (optional).
-- Writes back the charge of a release found on the releases topic after Redis lost it (stream-dp budget rebuild
-- --from-topic, stream_dp/release/ledger_rebuild.py). No cap check: the release was published, so its cost
-- was spent, whatever the ledger holds now. Idempotent: a release id the scope has charged is left alone
-- (returns 0). The first result carries the published budget block, so a republication is byte-identical.
local release_id = ARGS.release_id
if redis.call('HEXISTS', KEYS[3], release_id) == 1 then return 0 end
store_cap()
local c = args_cost()
local total = add(committed(), c)
store_committed(total)
log_entry('restore', release_id, '', c, ARGS.events, ARGS.now)
if HAS_PAYLOAD then redis.call('HSET', KEYS[4], release_id, PAYLOAD) end
local result = result_json(true, 'ok', with_reservations(total, nil))
if ARGS.block then result = string.sub(result, 1, -2) .. ',"block":' .. ARGS.block .. '}' end
redis.call('HSET', KEYS[3], release_id, result)
return 1

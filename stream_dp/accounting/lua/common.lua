-- Shared prelude of the ledger scripts (stream_dp/accounting/ledger.py prepends it to each operation).
--
-- KEYS (all share the hash tag {ledger:<scope>}, so one scope lives in one cluster slot):
--   1 totals        HASH  committed sums: rho, zd, beps, bd, binf (count of charges with basic eps = inf), n
--   2 log           STREAM append-only: one entry per charge / reserve / settle / cancel
--   3 charges       HASH  release_id -> first result (JSON)
--   4 outbox        HASH  release_id -> stored release payload
--   5 unpublished   ZSET  release_id (score: charge number), stored but not yet published
--   6 reservations  HASH  reservation_id -> "rho zd beps bd binf" (open holds)
--   7 res_results   HASH  reservation_id -> first reserve result (JSON)
--   8 settled       HASH  reservation_id -> release_id it was settled as
--   9 cap           HASH  the cap the scope was first charged under: epsilon, delta, delta_prime (repr strings),
--                         lifetime_epsilon, lifetime_delta (the lifetime cap then in force, 0: none), since
-- ARGV[1]: the operation's arguments, named: a JSON object (stream_dp/accounting/ledger_args.py, version
--   PROTOCOL_VERSION) decoded into ARGS: v, op, cap = {epsilon, delta, delta_prime, lifetime_epsilon,
--   lifetime_delta} (the worker's configured cap: used only by a scope with no stored cap, which stores it),
--   and the operation's fields (release_id, reservation_id, cost = {rho, zd, beps, bd, binf}, events, now).
-- ARGV[2] (charge, settle): the payload to store with the release, when there is one.
--
-- Floating point: every sum and the cap rule below are the same IEEE-754 operations, in the same order,
-- as stream_dp.accounting.budget.decide / Ledger._projected in Python. Real numbers arrive as Python repr
-- strings and leave as '%.17g' strings, both of which round-trip doubles exactly.

local PROTOCOL_VERSION = 2
local ARGS = cjson.decode(ARGV[1])
if ARGS.v ~= PROTOCOL_VERSION then
  return redis.error_reply('ledger protocol version ' .. tostring(ARGS.v) .. ' sent, these scripts read version '
                           .. PROTOCOL_VERSION)
end
-- The cap belongs to the period (stream_dp/accounting/period_caps.py): the cap stored with the scope's first
-- write, else -- for a scope never written -- the worker's configured one, which that first write stores.
local STORED_CAP = redis.call('HMGET', KEYS[9], 'epsilon', 'delta', 'delta_prime')
local CAP_STORED = STORED_CAP[1] ~= false
local CAP = ARGS.cap
if CAP_STORED then CAP = {epsilon = STORED_CAP[1], delta = STORED_CAP[2], delta_prime = STORED_CAP[3]} end
local CAP_EPS = tonumber(CAP.epsilon)
local CAP_DELTA = tonumber(CAP.delta)
local DELTA_PRIME = tonumber(CAP.delta_prime)
local HAS_PAYLOAD = ARGV[2] ~= nil
local PAYLOAD = ARGV[2]

local function fmt(x)
  return string.format('%.17g', x)
end

local function zero()
  return {rho = 0, zd = 0, beps = 0, bd = 0, binf = 0}
end

local function add(a, b)
  return {rho = a.rho + b.rho, zd = a.zd + b.zd, beps = a.beps + b.beps, bd = a.bd + b.bd, binf = a.binf + b.binf}
end

-- the cost of the operation (ARGS.cost), as numbers
local function args_cost()
  local c = ARGS.cost
  return {rho = tonumber(c.rho), zd = tonumber(c.zd), beps = tonumber(c.beps), bd = tonumber(c.bd),
          binf = tonumber(c.binf)}
end

local function encode_cost(c)
  return fmt(c.rho) .. ' ' .. fmt(c.zd) .. ' ' .. fmt(c.beps) .. ' ' .. fmt(c.bd) .. ' ' .. string.format('%d', c.binf)
end

local function decode_cost(s)
  local v = {}
  for part in string.gmatch(s, '%S+') do v[#v + 1] = tonumber(part) end
  return {rho = v[1], zd = v[2], beps = v[3], bd = v[4], binf = v[5]}
end

local function committed()
  local t = redis.call('HMGET', KEYS[1], 'rho', 'zd', 'beps', 'bd', 'binf')
  return {rho = tonumber(t[1]) or 0, zd = tonumber(t[2]) or 0, beps = tonumber(t[3]) or 0,
          bd = tonumber(t[4]) or 0, binf = tonumber(t[5]) or 0}
end

-- base + every open reservation except `skip`, added in sorted reservation-id order
local function with_reservations(base, skip)
  local flat = redis.call('HGETALL', KEYS[6])
  local ids, costs = {}, {}
  for i = 1, #flat, 2 do
    if flat[i] ~= skip then
      ids[#ids + 1] = flat[i]
      costs[flat[i]] = flat[i + 1]
    end
  end
  table.sort(ids)
  local total = base
  for _, id in ipairs(ids) do total = add(total, decode_cost(costs[id])) end
  return total
end

-- BEGIN zcdp_to_epsilon (tests/integration/test_zcdp_conversion_lua.py runs this block on its own)
-- epsilon of the (epsilon, delta_prime)-DP guarantee of rho-zCDP: the optimal conversion of Canonne, Kamath &
-- Steinke 2020, Cor. 13: eps = inf over alpha > 1 of alpha*rho + (ln(1/delta') - ln alpha)/(alpha - 1) +
-- ln(1 - 1/alpha). Golden-section search over u = ln(alpha - 1) in [-30, 30], 100 steps; the bound at the
-- final order rounded up by 1e-12 of its terms, capped by the classic rho + 2*sqrt(rho*ln(1/delta')), floored
-- at 0. The same constants, operations and order as stream_dp.accounting.composition.zcdp_to_epsilon.
local function cks_epsilon_at_order(rho, log_inv_delta, alpha)
  return alpha * rho + (log_inv_delta - math.log(alpha)) / (alpha - 1) + math.log(1 - 1 / alpha)
end

local function zcdp_to_epsilon(rho, delta_prime)
  local log_inv_delta = math.log(1 / delta_prime)
  local loose = rho + 2 * math.sqrt(rho * log_inv_delta)
  if rho == 0 or rho == math.huge then return loose end
  local ratio = (math.sqrt(5.0) - 1) / 2
  local lo, hi = -30.0, 30.0
  local x1 = hi - ratio * (hi - lo)
  local x2 = lo + ratio * (hi - lo)
  local f1 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x1))
  local f2 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x2))
  for _ = 1, 100 do
    if f1 <= f2 then
      hi, x2, f2 = x2, x1, f1
      x1 = hi - ratio * (hi - lo)
      f1 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x1))
    else
      lo, x1, f1 = x1, x2, f2
      x2 = lo + ratio * (hi - lo)
      f2 = cks_epsilon_at_order(rho, log_inv_delta, 1 + math.exp(x2))
    end
  end
  local best = x2
  if f1 <= f2 then best = x1 end
  local alpha = 1 + math.exp(best)
  local a = alpha * rho
  local b = (log_inv_delta - math.log(alpha)) / (alpha - 1)
  local c = math.log(1 - 1 / alpha)
  local eps = a + b + c + 1e-12 * (math.abs(a) + math.abs(b) + math.abs(c))
  if loose < eps then eps = loose end
  if eps < 0 then eps = 0 end
  return eps
end
-- END zcdp_to_epsilon

-- the cap rule: smaller valid epsilon of zCDP conversion and basic composition; delta incl. delta_prime
local function decide(t)
  local eps = zcdp_to_epsilon(t.rho, DELTA_PRIME)
  if t.binf == 0 and t.beps < eps then eps = t.beps end
  if not (eps <= CAP_EPS) then return 'epsilon_cap' end
  local d = t.zd
  if t.bd > d then d = t.bd end
  d = d + DELTA_PRIME
  if not (d <= CAP_DELTA) then return 'delta_cap' end
  return 'ok'
end

-- the result names the cap it was decided under (the scope's, as repr strings: they round-trip exactly)
local function result_json(accepted, reason, t)
  return string.format('{"accepted":%s,"reason":"%s","rho":%s,"zd":%s,"beps":%s,"bd":%s,"binf":%d,'
    .. '"cap":{"epsilon":"%s","delta":"%s","delta_prime":"%s"}}',
    accepted and 'true' or 'false', reason, fmt(t.rho), fmt(t.zd), fmt(t.beps), fmt(t.bd), t.binf,
    CAP.epsilon, CAP.delta, CAP.delta_prime)
end

-- the scope's first write stores the cap it was checked against; later ones find it stored
local function store_cap()
  if CAP_STORED then return end
  redis.call('HSET', KEYS[9], 'epsilon', CAP.epsilon, 'delta', CAP.delta, 'delta_prime', CAP.delta_prime,
             'lifetime_epsilon', CAP.lifetime_epsilon or '0', 'lifetime_delta', CAP.lifetime_delta or '0',
             'since', ARGS.now)
  CAP_STORED = true
end

local function store_committed(t)
  redis.call('HSET', KEYS[1], 'rho', fmt(t.rho), 'zd', fmt(t.zd), 'beps', fmt(t.beps), 'bd', fmt(t.bd),
             'binf', string.format('%d', t.binf))
  return redis.call('HINCRBY', KEYS[1], 'n', 1)
end

local function log_entry(kind, id, reservation, c, events, now)
  redis.call('XADD', KEYS[2], '*', 'type', kind, 'id', id, 'reservation', reservation, 'rho', fmt(c.rho),
             'zd', fmt(c.zd), 'beps', fmt(c.beps), 'bd', fmt(c.bd), 'binf', string.format('%d', c.binf),
             'events', events, 'time', now)
end

-- commit a cost as release `release_id` (the caller has checked the cap); store the payload if any
local function commit(release_id, reservation, c, kind)
  store_cap()
  local total = add(committed(), c)
  local n = store_committed(total)
  log_entry(kind, release_id, reservation, c, ARGS.events, ARGS.now)
  if HAS_PAYLOAD then
    redis.call('HSET', KEYS[4], release_id, PAYLOAD)
    redis.call('ZADD', KEYS[5], n, release_id)
  end
  local result = result_json(true, 'ok', with_reservations(total, nil))
  redis.call('HSET', KEYS[3], release_id, result)
  return result
end

local function duplicate_charge(release_id)
  local first = redis.call('HGET', KEYS[3], release_id)
  if first then
    return {1, first, redis.call('HGET', KEYS[4], release_id)}
  end
  return nil
end

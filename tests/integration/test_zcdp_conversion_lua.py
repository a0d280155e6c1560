"""The ledger script's zCDP → (ε, δ) conversion equals the Python one, on a real redis-server.

The Lua block between ``-- BEGIN zcdp_to_epsilon`` and ``-- END zcdp_to_epsilon`` in
stream_dp/store/lua/ledger_common.lua is what the ledger's cap rule calls; it is run here on its own (EVAL)
over a grid of (ρ, δ′) and compared with :func:`stream_dp.accounting.composition.zcdp_to_epsilon`. The two
use the same constants and operations in the same order, so they agree to the last bit on this machine; the
assertion allows 1e-12 relative (a different libm) and the Python side's soundness is tested in
tests/unit/test_zcdp_conversion.py.
"""

from __future__ import annotations

import random

import pytest

from stream_dp.accounting.composition import loose_zcdp_to_epsilon, zcdp_to_epsilon
from stream_dp.store.scripts import lua_file

pytestmark = pytest.mark.integration


def conversion_block() -> str:
    text = lua_file("ledger_common")
    begin, end = text.index("-- BEGIN zcdp_to_epsilon"), text.index("-- END zcdp_to_epsilon")
    return text[begin:end]


EVAL_ALL = """
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = string.format('%.17g', zcdp_to_epsilon(tonumber(ARGV[i]), tonumber(ARGV[i + 1])))
end
return out
"""


def lua_epsilons(redis_client, block: str, pairs: list[tuple[float, float]]) -> list[float]:
    args = [repr(x) for pair in pairs for x in pair]
    return [float(x) for x in redis_client.eval(block + EVAL_ALL, 0, *args)]


def grid() -> list[tuple[float, float]]:
    rnd = random.Random(18)
    pairs = [(rho, delta) for rho in (0.0, 1e-9, 1e-6, 1e-3, 0.0125, 0.1, 0.5, 1.0, 5.0, 50.0, 1e3)
             for delta in (1e-12, 1e-9, 1e-7, 1e-6, 1e-5, 1e-3, 0.1)]
    pairs += [(10 ** rnd.uniform(-8, 3), 10 ** rnd.uniform(-12, -1)) for _ in range(400)]
    return pairs


def test_lua_conversion_equals_python(redis_client):
    pairs = grid()
    lua = lua_epsilons(redis_client, conversion_block(), pairs)
    identical = 0
    for (rho, delta), got in zip(pairs, lua):
        want = zcdp_to_epsilon(rho, delta)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (rho, delta)
        assert got <= loose_zcdp_to_epsilon(rho, delta)
        identical += got == want
    assert identical == len(pairs)  # same doubles: the cap decision is the same on both sides


@pytest.mark.parametrize("broken", [
    ("for _ = 1, 100 do", "for _ = 1, 60 do"),  # fewer search steps
    ("+ math.log(1 - 1 / alpha)\nend", "\nend"),  # a term dropped from the per-order bound
    ("1e-12 * (math.abs(a)", "0 * (math.abs(a)"),  # no rounding allowance
])
def test_a_diverging_lua_conversion_is_caught(redis_client, broken):
    block = conversion_block()
    old, new = broken
    assert old in block
    pairs = grid()
    lua = lua_epsilons(redis_client, block.replace(old, new), pairs)
    assert any(got != zcdp_to_epsilon(*pair) for pair, got in zip(pairs, lua))  # test above: all identical

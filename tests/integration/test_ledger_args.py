"""The ledger protocol: what Python's encoder (stream_dp.accounting.ledger_args) writes is what the Lua prelude
(stream_dp/accounting/lua/common.lua) reads, on a real redis-server."""

from __future__ import annotations

import json
import struct
from importlib import resources

import numpy as np
import pytest
import redis

from stream_dp.accounting import ledger_args

pytestmark = pytest.mark.integration

COMMON = (resources.files("stream_dp.accounting") / "lua" / "common.lua").read_text(encoding="utf-8")
# After the prelude: every field as Lua sees it (reals re-printed with '%.17g', which round-trips doubles)
ECHO = COMMON + """
local c = args_cost()
return cjson.encode({op = ARGS.op, release_id = ARGS.release_id, reservation_id = ARGS.reservation_id,
  events = ARGS.events, now = fmt(tonumber(ARGS.now)), cap = {fmt(CAP_EPS), fmt(CAP_DELTA), fmt(DELTA_PRIME)},
  cost = {fmt(c.rho), fmt(c.zd), fmt(c.beps), fmt(c.bd), string.format('%d', c.binf)},
  payload = HAS_PAYLOAD and PAYLOAD or false})
"""


def doubles(rng: np.random.Generator, n: int) -> list[float]:
    """Awkward finite non-negative doubles: random bit patterns, subnormals, the extremes, 0.1 + 0.2."""
    fixed = [0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1 + 0.2, 1 / 3, 1e-7]
    bits = [abs(struct.unpack("<d", struct.pack("<Q", int(b)))[0])
            for b in rng.integers(0, 2**63, size=4 * n, dtype=np.uint64)]
    return fixed + [x for x in bits if np.isfinite(x)][:n]


def test_python_encoder_and_lua_decoder_agree_on_every_field(redis_client: redis.Redis) -> None:
    echo = redis_client.register_script(ECHO)
    rng = np.random.default_rng(3)
    values = doubles(rng, 200)
    for i in range(0, len(values) - 8, 8):
        v = values[i:i + 9]
        cost = {"rho": v[0], "zd": v[1], "beps": v[2], "bd": v[3], "binf": i % 3}
        cap = {"epsilon": v[4], "delta": v[5], "delta_prime": v[6]}
        payload = None if i % 2 else '{"record": "ü \\" \\u0000 ' + str(i) + '"}'
        events = json.dumps([{"kind": "pure_dp", "epsilon": v[7]}])
        argv = ledger_args.encode("settle", cap=cap, payload=payload, reservation_id=f"r/{i}",
                                  release_id=f"0-60.topk{i}", cost=cost, events=events, now=v[8])
        seen = json.loads(echo(keys=[f"k{j}" for j in range(9)], args=argv))
        assert [float(x) for x in seen["cost"][:4]] == [v[0], v[1], v[2], v[3]]
        assert int(seen["cost"][4]) == i % 3
        assert [float(x) for x in seen["cap"]] == [v[4], v[5], v[6]]
        assert float(seen["now"]) == v[8]
        assert (seen["op"], seen["reservation_id"], seen["release_id"]) == ("settle", f"r/{i}", f"0-60.topk{i}")
        assert seen["events"] == events
        assert seen["payload"] == (payload if payload is not None else False)


def test_a_script_refuses_another_protocol_version(redis_client: redis.Redis) -> None:
    echo = redis_client.register_script(ECHO)
    (header,) = ledger_args.encode("cancel", cap={"epsilon": 1, "delta": 1e-5, "delta_prime": 1e-7},
                                   reservation_id="r", now=1)
    old = json.dumps({**json.loads(header), "v": 1})
    with pytest.raises(redis.ResponseError, match="version 1 sent, these scripts read version 2"):
        echo(keys=[f"k{j}" for j in range(9)], args=[old])


def test_the_encoder_names_a_missing_or_unknown_field() -> None:
    cap = {"epsilon": 1, "delta": 1e-5, "delta_prime": 1e-7}
    with pytest.raises(ValueError, match=r"missing \['now'\], unknown \['when'\]"):
        ledger_args.encode("cancel", cap=cap, reservation_id="r", when=1)
    with pytest.raises(ValueError, match="finite numbers only"):
        ledger_args.encode("cancel", cap={**cap, "epsilon": float("inf")}, reservation_id="r", now=1)
    with pytest.raises(ValueError, match="stores no payload"):
        ledger_args.encode("reserve", cap=cap, payload="x", reservation_id="r", cost={}, events="[]", now=1)

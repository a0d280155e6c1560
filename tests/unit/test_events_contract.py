"""Contract suite every DP event type runs: n copies == repeated(n) (== count=n where
count means repetitions), to_dict round trip, immutability, bad parameters raise ValueError."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from stream_dp.accounting.composition import Spent, compose
from stream_dp.accounting.events import (
    EVENT_TYPES,
    ApproxDpEvent,
    DpEvent,
    PureDpEvent,
    RangeBoundedEvent,
    ZCdpAndApproxDpEvent,
    ZCdpEvent,
    event_from_dict,
)

# One representative per type, plus the invalid parameter sets each must reject.
EXAMPLES: dict[type[DpEvent], DpEvent] = {
    PureDpEvent: PureDpEvent(0.3, count=2, mechanism="adaptive_svt", release_id="1-2.alerts"),
    RangeBoundedEvent: RangeBoundedEvent(0.1, count=4, delta=1e-7, mechanism="limited_domain_topk"),
    ApproxDpEvent: ApproxDpEvent(0.5, 1e-6, count=3, mechanism="private_weighted_sample"),
    ZCdpEvent: ZCdpEvent(0.02, 1e-8, count=2, mechanism="gaussian"),
    ZCdpAndApproxDpEvent: ZCdpAndApproxDpEvent(0.02, 1e-8, 1.0, 1e-7, count=2, mechanism="gaussian_histogram"),
}
BAD_PARAMS: dict[type[DpEvent], list[dict]] = {
    PureDpEvent: [dict(epsilon=0), dict(epsilon=-1), dict(epsilon=math.inf), dict(epsilon=math.nan),
                  dict(epsilon="1"), dict(epsilon=True), dict(epsilon=1, count=0), dict(epsilon=1, count=1.5),
                  dict(epsilon=1, count=True), dict(epsilon=1, mechanism=None), dict(epsilon=1, release_id=3)],
    RangeBoundedEvent: [dict(epsilon=0), dict(epsilon=1, delta=1), dict(epsilon=1, delta=-1e-9),
                        dict(epsilon=1, delta=math.nan), dict(epsilon=1, count=-2)],
    ApproxDpEvent: [dict(epsilon=1, delta=1.0), dict(epsilon=1, delta=-0.1), dict(epsilon=-1, delta=0.1),
                    dict(epsilon=1, delta=0.1, count=0)],
    ZCdpEvent: [dict(rho=0), dict(rho=-1), dict(rho=math.inf), dict(rho=0.1, delta=1.5), dict(rho=0.1, count=0)],
    ZCdpAndApproxDpEvent: [dict(rho=0, zcdp_delta=0, epsilon=1, delta=0), dict(rho=0.1, zcdp_delta=1, epsilon=1, delta=0),
                           dict(rho=0.1, zcdp_delta=0, epsilon=0, delta=0),
                           dict(rho=0.1, zcdp_delta=0, epsilon=math.inf, delta=0),
                           dict(rho=0.1, zcdp_delta=0, epsilon=1, delta=-1e-9),
                           dict(rho=0.1, zcdp_delta=0, epsilon=1, delta=0, count=0),
                           dict(rho=0.1, zcdp_delta=math.nan, epsilon=1, delta=0)],
}


def test_every_event_type_is_covered():
    assert set(EXAMPLES) == set(EVENT_TYPES.values()) == set(BAD_PARAMS)


def _close(a: Spent, b: Spent) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-12) or x == y for x, y in
               zip(dataclasses.astuple(a), dataclasses.astuple(b)))


@pytest.mark.parametrize("cls", list(EXAMPLES), ids=lambda c: c.kind)
@pytest.mark.parametrize("n", [1, 2, 7, 50])
def test_n_copies_compose_like_repeated(cls, n):
    event = EXAMPLES[cls]
    assert _close(compose([event] * n), compose([event.repeated(n)]))


@pytest.mark.parametrize("cls", [PureDpEvent, ApproxDpEvent, ZCdpEvent, ZCdpAndApproxDpEvent], ids=lambda c: c.kind)
@pytest.mark.parametrize("n", [2, 7, 50])
def test_count_n_equals_n_copies_for_repetition_counts(cls, n):
    one = dataclasses.replace(EXAMPLES[cls], count=1)
    assert dataclasses.replace(one, count=n) == one.repeated(n)
    assert _close(compose([one] * n), compose([dataclasses.replace(one, count=n)]))


def test_range_bounded_count_is_outcomes_of_one_call():
    """δ belongs to the call: 4 outcomes of one call pay δ once, 4 calls of one outcome pay 4δ."""
    one_call = RangeBoundedEvent(0.1, count=4, delta=1e-7)
    four_calls = [RangeBoundedEvent(0.1, count=1, delta=1e-7)] * 4
    assert compose([one_call]).rho == pytest.approx(compose(four_calls).rho)
    assert compose([one_call]).zcdp_delta == 1e-7
    assert compose(four_calls).zcdp_delta == pytest.approx(4e-7)
    assert RangeBoundedEvent(0.1, count=1, delta=0.0).repeated(4) == RangeBoundedEvent(0.1, count=4)


@pytest.mark.parametrize("cls", list(EXAMPLES), ids=lambda c: c.kind)
def test_to_dict_round_trips_through_json(cls):
    event = EXAMPLES[cls]
    data = json.loads(json.dumps(event.to_dict()))
    assert data["kind"] == cls.kind
    assert event_from_dict(data) == event


@pytest.mark.parametrize("cls", list(EXAMPLES), ids=lambda c: c.kind)
def test_numpy_scalars_are_normalised(cls):
    event = EXAMPLES[cls]
    numeric = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)
               if f.name not in ("mechanism", "release_id")}
    converted = cls(**{k: (np.int64(v) if isinstance(v, int) else np.float64(v)) for k, v in numeric.items()})
    assert converted == dataclasses.replace(event, mechanism="", release_id=None)
    json.dumps(converted.to_dict())  # plain Python numbers only


@pytest.mark.parametrize("cls", list(EXAMPLES), ids=lambda c: c.kind)
def test_events_are_immutable(cls):
    with pytest.raises(dataclasses.FrozenInstanceError):
        EXAMPLES[cls].count = 5  # type: ignore[misc]


@pytest.mark.parametrize("cls,params", [(c, p) for c, ps in BAD_PARAMS.items() for p in ps],
                         ids=lambda x: getattr(x, "kind", None) or str(x))
def test_bad_parameters_raise_value_error(cls, params):
    with pytest.raises(ValueError):
        cls(**params)


@pytest.mark.parametrize("data", [{"kind": "nope", "epsilon": 1}, {"epsilon": 1}, [1, 2],
                                  {"kind": "pure_dp", "epsilon": 1, "extra": 2}, {"kind": "approx_dp", "epsilon": 1},
                                  {"kind": "pure_dp", "epsilon": -1}])
def test_event_from_dict_rejects_bad_input_with_value_error(data):
    with pytest.raises(ValueError):
        event_from_dict(data)


def test_repeated_rejects_bad_n_and_delta_overflow():
    with pytest.raises(ValueError):
        PureDpEvent(1.0).repeated(0)
    with pytest.raises(ValueError):
        RangeBoundedEvent(0.1, delta=0.4).repeated(3)  # 1.2 is no probability


@pytest.mark.parametrize("event,rho,delta,beps,bdelta", [
    (PureDpEvent(0.5, count=3), 3 * 0.125, 0.0, 1.5, 0.0),
    (RangeBoundedEvent(0.4, count=5, delta=1e-7), 5 * 0.02, 1e-7, 2.0, 1e-7),
    (ApproxDpEvent(1.0, 1e-6, count=2), 1.0, 2e-6, 2.0, 2e-6),
    (ZCdpEvent(0.1, 1e-9, count=3), 0.30000000000000004, 3e-9, math.inf, 3e-9),
    (ZCdpAndApproxDpEvent(0.1, 1e-9, 1.0, 1e-7, count=3), 0.30000000000000004, 3e-9, 3.0, 3e-7),
])
def test_privacy_maps_pin_decision_1(event, rho, delta, beps, bdelta):
    """docs/privacy.md §2: ε-BR → ε²/8, pure ε → ε²/2, (ε, δ) → ε²/2 with δ, zCDP as is."""
    assert event.zcdp() == pytest.approx((rho, delta))
    assert event.basic() == pytest.approx((beps, bdelta))

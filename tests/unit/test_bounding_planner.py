"""The bounding planner (WindowBounding): the rule on a cache, tentative plans, rollback and catch-up.

The reference here is written independently of the code under test: per user, the distinct keys in
apply order, the first Δ of them counted.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dp.ingest.bounding import WindowBounding
from stream_dp.store.bounding_log import decode_log, encode_log

USERS = ["u1", "u2", "u1a", "ü"]
KEYS = ["a", "ab", "b", "ba", "a b", "%z", "ключ"]


def reference(events: list[tuple[str, str]], max_keys: int) -> tuple[Counter, list[str]]:
    """Counts and one outcome per event ("counted" | "linf" | "l0") for events in apply order."""
    kept: dict[str, list[str]] = {}
    outcomes = []
    for user, key in events:
        mine = kept.setdefault(user, [])
        if key in mine:
            outcomes.append("linf")
        elif len(mine) == max_keys:
            outcomes.append("l0")
        else:
            mine.append(key)
            outcomes.append("counted")
    return Counter(k for ks in kept.values() for k in ks), outcomes


def reference_keys(events: list[tuple[str, str]], max_keys: int) -> dict[str, list[str]]:
    """Each user's counted keys, in the order counted."""
    kept: dict[str, list[str]] = {}
    for user, key in events:
        mine = kept.setdefault(user, [])
        if key not in mine and len(mine) < max_keys:
            mine.append(key)
    return kept


def state(b: WindowBounding) -> tuple:
    return copy.deepcopy((b.token, b.log_bytes, b.keys_of, b.applied_through))


def chunks_of(events: list[tuple[str, str]], cuts: list[int]) -> list[list[tuple[int, str, str]]]:
    bounds = sorted({c for c in cuts if 0 < c < len(events)}) + [len(events)]
    out, lo = [], 0
    for hi in bounds:
        out.append([(i, u, k) for i, (u, k) in enumerate(events[lo:hi], start=lo)])
        lo = hi
    return out


events_st = st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(KEYS)), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(events=events_st, max_keys=st.integers(1, 4), cuts=st.lists(st.integers(1, 59), max_size=5))
def test_plans_over_any_chunking_equal_the_rule(events, max_keys, cuts):
    b = WindowBounding(max_keys)
    counts: Counter = Counter()
    linf = l0 = applied = 0
    logged = b""
    for n, chunk in enumerate(chunks_of(events, cuts)):
        plan = b.plan(0, chunk, token=f"t{n}")
        counts.update(plan.increments)
        linf, l0, applied = linf + plan.linf, l0 + plan.l0, applied + plan.applied
        assert plan.duplicate == 0 and plan.last_offset == chunk[-1][0]
        logged += plan.log
    want, outcomes = reference(events, max_keys)
    assert counts == want
    assert (applied, linf, l0) == (outcomes.count("counted"), outcomes.count("linf"), outcomes.count("l0"))
    assert decode_log(logged) == [e for e, o in zip(events, outcomes) if o == "counted"]
    assert b.log_bytes == len(logged) and all(len(b.keys(u)) <= max_keys for u in b.keys_of)
    assert {u: list(b.keys(u)) for u in b.keys_of} == {u: list(ks) for u, ks in reference_keys(events, max_keys).items()}


def test_event_unit_counts_every_event_and_logs_nothing():
    b = WindowBounding(1, unit="event")
    plan = b.plan(3, [(0, "u", "a"), (1, "u", "a"), (2, "u", "b")], token="t")
    assert plan.increments == {"a": 2, "b": 1} and plan.applied == 3 and plan.log == b"" and b.keys_of == {}


def test_a_replayed_prefix_is_duplicate_and_an_all_duplicate_chunk_changes_nothing():
    b = WindowBounding(2)
    b.plan(0, [(10, "u", "a"), (11, "u", "b")], token="t1")
    before = state(b)
    again = b.plan(0, [(10, "u", "a"), (11, "u", "b")], token="t2")
    assert (again.duplicate, again.applied, again.last_offset, again.increments) == (2, 0, None, {})
    assert state(b) == before  # nothing new: the token does not move either
    mixed = b.plan(0, [(11, "u", "b"), (12, "u", "c"), (13, "v", "c")], token="t3")
    assert (mixed.duplicate, mixed.applied, mixed.l0, mixed.increments) == (1, 1, 1, {"c": 1})
    other = b.plan(1, [(0, "w", "a")], token="t4")  # offsets are per partition
    assert other.duplicate == 0 and other.applied == 1


@settings(max_examples=100, deadline=None)
@given(events=events_st, max_keys=st.integers(1, 3), cuts=st.lists(st.integers(1, 59), max_size=5),
       keep=st.integers(0, 6))
def test_rollback_newest_first_restores_the_state_exactly(events, max_keys, cuts, keep):
    b = WindowBounding(max_keys)
    chunks = chunks_of(events, cuts)
    confirmed = chunks[:keep]
    for n, chunk in enumerate(confirmed):
        b.plan(0, chunk, token=f"c{n}")
    before = state(b)
    plans = [b.plan(0, chunk, token=f"p{n}") for n, chunk in enumerate(chunks[keep:])]
    for plan in reversed(plans):
        b.rollback(plan)
    assert state(b) == before


def test_rollback_out_of_order_is_refused():
    b = WindowBounding(2)
    p1 = b.plan(0, [(0, "u", "a")], token="t1")
    b.plan(0, [(1, "u", "b")], token="t2")
    with pytest.raises(RuntimeError, match="newest first"):
        b.rollback(p1)


def test_offsets_that_do_not_increase_are_refused_and_leave_the_cache_unchanged():
    b = WindowBounding(3)
    b.plan(0, [(0, "u", "a")], token="t1")
    before = state(b)
    with pytest.raises(ValueError, match=r"partition 0: offsets must increase within a chunk \(2 after 2\)"):
        b.plan(0, [(1, "u", "b"), (2, "v", "c"), (2, "w", "d")], token="t2")
    assert state(b) == before
    with pytest.raises(ValueError, match="offsets must increase"):
        b.plan(0, [(3, "u", "x"), (1, "u", "y")], token="t3")
    assert state(b) == before


@settings(max_examples=100, deadline=None)
@given(events=events_st, max_keys=st.integers(1, 3), cuts=st.lists(st.integers(1, 59), max_size=5),
       writer=st.lists(st.booleans(), min_size=6, max_size=6))
def test_two_writers_that_absorb_each_others_log_bound_like_one(events, max_keys, cuts, writer):
    """Each chunk is planned by one of two caches after it caught up with the other's log: together they
    make the choices of a single cache (the shared log is the order of application)."""
    a, b = WindowBounding(max_keys), WindowBounding(max_keys)
    log = b""
    counts: Counter = Counter()
    for n, chunk in enumerate(chunks_of(events, cuts)):
        me = a if writer[n % len(writer)] else b
        me.absorb(token=f"v{n}", log_from=me.log_bytes, log_tail=log[me.log_bytes:],
                  applied_through={0: chunk[0][0] - 1} if chunk[0][0] else {})
        plan = me.plan(0, chunk, token=f"v{n + 1}")
        log += plan.log
        counts.update(plan.increments)
    assert counts == reference(events, max_keys)[0]


def test_absorb_from_zero_resets_a_cache_whose_log_was_replaced():
    b = WindowBounding(2)
    b.plan(0, [(0, "u", "a"), (1, "v", "b")], token="t1")
    b.absorb(token="t9", log_from=0, log_tail=encode_log(["w", "c"]), applied_through={0: 7})
    assert ({u: b.keys(u) for u in b.keys_of}, b.log_bytes, b.applied_through, b.token) == ({"w": ("c",)}, 4, {0: 7}, "t9")
    with pytest.raises(ValueError, match="read from byte 2, but the cache holds 4 bytes"):
        b.absorb(token="t10", log_from=2, log_tail=b"", applied_through={})


def test_log_round_trip_and_a_torn_log_is_an_error():
    pairs = ["ü", "ключ", "u2", "a b"]
    raw = encode_log(pairs)
    assert decode_log(raw) == [("ü", "ключ"), ("u2", "a b")] and encode_log([]) == b""
    with pytest.raises(ValueError, match="pair boundary"):
        decode_log(raw[:-1])
    with pytest.raises(ValueError, match="pair boundary"):
        decode_log(b"not a log")

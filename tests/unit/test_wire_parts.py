"""Cutting a release record into part messages (stream_dp.wire) and joining them (the client's
PartJoiner): every part fits, the cut is deterministic, joining gives the record back, whatever the items."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dp.client import PartJoiner
from stream_dp.wire import ReleaseTooLarge, encode, join_parts, message_parts

BASE = {"release_id": "0-60.sample", "schema_version": 1, "type": "sample", "window": {"start": 0, "end": 60}}

items = st.lists(st.fixed_dictionaries({"key": st.text(min_size=1, max_size=40),
                                        "estimate": st.floats(0, 1e9, allow_nan=False)}), max_size=300)


@settings(max_examples=200, deadline=None)
@given(items=items, limit=st.integers(400, 20_000))
def test_parts_fit_join_back_and_are_cut_the_same_way_every_time(items, limit):
    record = {**BASE, "items": items}
    messages = message_parts(record, limit)
    assert all(len(m) <= limit for m in messages)
    assert message_parts(record, limit) == messages  # a republication sends the identical messages
    if len(encode(record)) <= limit:
        assert messages == [encode(record)]
        return
    parts = [json.loads(m) for m in messages]
    assert [p["part"] for p in parts] == [{"index": i, "count": len(parts)} for i in range(len(parts))]
    assert all({k: v for k, v in p.items() if k not in ("items", "part")} == BASE for p in parts)
    assert join_parts(parts[::-1]) == json.loads(encode(record))  # any order
    joiner = PartJoiner()
    out = [joiner.offer("p0", i, p) for i, p in enumerate(parts)]
    assert out[:-1] == [None] * (len(parts) - 1) and out[-1] == json.loads(encode(record))


def test_a_record_that_cannot_be_cut_small_enough_is_refused_naming_the_setting():
    with pytest.raises(ReleaseTooLarge, match="kafka.release_message_max_bytes"):
        message_parts({**BASE, "items": [{"key": "x" * 1000}]}, 500)
    with pytest.raises(ReleaseTooLarge, match="without items"):
        message_parts({**BASE, "info": {"note": "y" * 1000}, "items": []}, 500)


def test_the_joiner_drops_an_interrupted_release_and_holds_commits_at_its_first_part():
    parts = [json.loads(m) for m in message_parts({**BASE, "items": [{"key": f"k{i}"} for i in range(100)]}, 400)]
    other = {**BASE, "release_id": "60-120.sample", "items": []}
    joiner = PartJoiner()
    assert joiner.offer("p0", 10, parts[0]) is None and joiner.first_offset("p0") == 10
    assert joiner.first_offset("p1") is None  # per partition
    assert joiner.offer("p0", 11, other) == other  # another release: the interrupted one is dropped
    assert joiner.first_offset("p0") is None
    whole = {**BASE, "items": [{"key": f"k{i}"} for i in range(100)]}
    got = [joiner.offer("p0", 20 + i, p) for i, p in enumerate(parts[:1] + parts)]  # a part twice: same bytes
    assert got[:-1] == [None] * len(parts) and got[-1] == whole
    assert joiner.first_offset("p0") is None  # joined: commits move on
    assert joiner.offer("p0", 40, parts[1]) is None and joiner.first_offset("p0") == 40  # a later copy's part

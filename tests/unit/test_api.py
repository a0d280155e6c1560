"""The library (stream_dp/api.py): one call per release at a window budget, running what the release worker runs."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from stream_dp import api
from stream_dp.config import config_from_mapping
from stream_dp.dev.demo_data import generate_ratings
from stream_dp.ingest.bounding import bounded_window_counts
from stream_dp.release.builders import HistogramBuilder, TopkBuilder
from stream_dp.release.records import validate_record

RATINGS = generate_ratings(users=400, movies=300, days=3, seed=5)
ROWS = [(str(r.user_id), str(r.movie_id)) for r in RATINGS]


class Frame:
    """A DataFrame-like object: named columns, each with ``tolist`` (what pandas and polars give)."""

    columns = ("userId", "movieId")

    def __init__(self, rows):
        self.data = {"userId": np.array([u for u, _ in rows]), "movieId": np.array([k for _, k in rows])}

    def __getitem__(self, name):
        return self.data[name]


def test_rows_are_bounded_as_ingest_bounds_a_window() -> None:
    counts = dict(api.bounded(ROWS, max_keys_per_user=5).counts)
    (window,) = bounded_window_counts(((0, u, k) for u, k in ROWS), window_size=10**9, max_keys_per_user=5).values()
    assert counts == window
    assert dict(api.bounded(Frame(ROWS), max_keys_per_user=5, columns=("userId", "movieId")).counts) == window
    assert dict(api.bounded({"user": [u for u, _ in ROWS], "key": [k for _, k in ROWS]},
                            max_keys_per_user=5).counts) == window


@pytest.mark.parametrize("call", ["histogram", "topk", "sample"])
def test_every_call_returns_a_release_record_of_the_schema(call) -> None:
    record = getattr(api, call)(ROWS, epsilon=1.0, delta=1e-6, max_keys_per_user=5, seed=3, window=(0, 86400))
    validate_record(record)  # the releases topic's schema, with the window budget as its budget block
    assert record["type"] == call and record["release_id"] == f"0-86400.{call}"
    budget = record["budget"]
    assert budget["epsilon_cap"] == 1.0 and budget["delta_cap"] == 1e-6
    assert 0 < budget["epsilon_spent"] <= 1.0 + 1e-12 and budget["delta_spent"] == 1e-6
    assert record["cost"]["events"]


def test_a_seed_reproduces_a_release_and_another_seed_draws_another() -> None:
    def items(seed):
        return api.histogram(ROWS, epsilon=1.0, delta=1e-6, max_keys_per_user=5, seed=seed)["items"]
    assert items(7) == items(7) != items(8)


def test_a_seeded_release_is_the_same_across_the_sampler_speed_ups() -> None:
    """The released items for fixed seeds, digests computed on d1e79a6 (before the packed-coin table of
    stream_dp/mechanisms/exact_batch.py) and pinned: making the production path faster must not change what a seeded
    release publishes (the evaluation's stream-dp rows are seeded, docs/evaluation)."""
    def digest(value: object) -> str:
        return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]

    counts = {f"k{i}": int(c) for i, c in enumerate(np.minimum(np.random.default_rng(0).zipf(1.3, 3000), 10**5))}
    domain = [f"k{i}" for i in range(0, 4000, 2)]
    common = {"counts": counts, "epsilon": 0.7, "delta": 1e-6, "max_keys_per_user": 5}
    items = api.histogram(**common, seed=14)["items"]
    assert digest([[i["key"], i["count"]] for i in items]) == "9e34f08ebe336fd4"
    items = api.histogram(**common, noise="laplace", domain=domain, seed=14)["items"]
    assert digest([[i["key"], i["count"]] for i in items]) == "2156ee4facb5ab5c"
    items = api.topk(**common, k=10, domain=domain, seed=16)["items"]
    assert digest([i["key"] for i in items]) == "0e6ec531dac7268e"


@pytest.mark.parametrize("config", [{}, {"calibration": "exact"}, {"noise": "laplace"}, {"weighting": "per_user"}],
                         ids=["zcdp", "exact", "laplace", "per_user"])
def test_the_histogram_is_the_release_workers(config) -> None:
    """Same window budget, same calibration, parameters and DP events as the release worker's histogram."""
    cfg = config_from_mapping({"releases": {"histogram": {"enabled": True, "window_epsilon": 0.7,
                                                          "window_delta": 4e-7, **config}}}, environ={})
    builder = HistogramBuilder(cfg)
    record = api.histogram(ROWS, epsilon=0.7, delta=4e-7, max_keys_per_user=5, seed=1, **config)
    params = record["mechanism"]["parameters"]
    assert params == builder.parameters()
    assert record["mechanism"]["name"] == builder.mechanism
    assert [e for e in record["cost"]["events"]] == [e.to_dict() for e in builder.measurement.privacy_map()]


@pytest.mark.parametrize("domain", [None, "threshold", "limited_domain"])
def test_topk_is_the_release_workers(domain) -> None:
    """Same window budget, same calibration and parameters as the release worker's top-k: limited domain, and over
    a public domain with either discovery (threshold discovery's σ², τ and ρ_d from the same window budget)."""
    extra = {"domain": ["1", "2", "3"], "discovery": domain, "discovery_share": 0.2} if domain else {}
    cfg = config_from_mapping({"releases": {"topk": {"window_epsilon": 1.5, "window_delta": 1e-6, "k": 5,
                                                     "k_bar": 50, **extra}}}, environ={})
    builder = TopkBuilder(cfg)
    record = api.topk(ROWS, epsilon=1.5, delta=1e-6, max_keys_per_user=5, k=5, k_bar=50, seed=1, **extra)
    mine = record["mechanism"]["parameters"]
    theirs = builder.parameters()
    for name in ("epsilon", "delta", "track_epsilon", "discover_epsilon", "window_epsilon", "window_delta", "k",
                 "discovery", "discovery_share", "discovery_sigma2", "discovery_threshold", "discovery_rho"):
        assert mine.get(name) == theirs.get(name), name
    if domain == "threshold":
        assert "discovery_threshold" in mine and "discover_epsilon" not in mine
    assert record["mechanism"]["name"] == builder.mechanism
    # pay what you get: the events are the outcomes returned, never more than what the worker reserves
    reserved = builder.measurement.privacy_map()
    assert sum(e["count"] for e in record["cost"]["events"]) <= sum(e.count for e in reserved)


def test_keys_of_any_hashable_type_and_a_public_domain_of_them() -> None:
    counts = {(1, "a"): 400, (2, "b"): 390, 17: 3}
    record = api.histogram(counts=counts, epsilon=1.0, delta=1e-6, max_keys_per_user=1, domain=[99, 17], seed=2)
    keys = [item["key"] for item in record["items"]]
    assert set(keys) >= {(1, "a"), (2, "b"), 99, 17}
    assert {item["key"]: item["source"] for item in record["items"]}[99] == "domain"
    top = api.topk(counts=counts, epsilon=2.0, delta=1e-6, max_keys_per_user=1, k=2, domain=[(1, "a"), 99],
                   discovery_share=0.0, seed=2)
    assert [item["key"] for item in top["items"]] == [(1, "a"), 99]


def test_the_published_fields_other_than_the_released_keys_do_not_depend_on_one_user() -> None:
    """D vs D minus one user: everything but items and info (the mechanism's output) is a function of the public
    parameters -- the calibration, the cost, the budget block."""
    bounder = api.bounded(ROWS, max_keys_per_user=5)
    # a user with a key nobody else has: removing her changes the set of keys, not only their counts
    lonely = next(u for u, k in bounder.pairs() if bounder.counts[k] == 1)
    without = [(u, k) for u, k in ROWS if u != lonely]
    assert len(api.bounded(without, max_keys_per_user=5).counts) < len(bounder.counts)
    for call in (api.histogram, api.sample):
        a = call(ROWS, epsilon=1.0, delta=1e-6, max_keys_per_user=5, seed=1)
        b = call(without, epsilon=1.0, delta=1e-6, max_keys_per_user=5, seed=1)
        for field in ("mechanism", "cost", "budget", "release_id", "window", "created_at", "status"):
            assert a[field] == b[field], (call.__name__, field)


def test_inputs_are_checked_naming_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="either the rows"):
        api.histogram(ROWS, counts={"a": 1}, epsilon=1.0, delta=1e-6, max_keys_per_user=1)
    with pytest.raises(ValueError, match="give the rows"):
        api.topk(epsilon=1.0, delta=1e-6, max_keys_per_user=1)
    with pytest.raises(ValueError, match="no column 'user'"):
        api.histogram({"who": ["u"], "what": ["k"]}, epsilon=1.0, delta=1e-6, max_keys_per_user=1)
    with pytest.raises(ValueError, match=r"\(user, key\) pair"):
        api.histogram([("u", "k", "extra")], epsilon=1.0, delta=1e-6, max_keys_per_user=1)
    with pytest.raises(ValueError, match="per_user"):
        api.histogram(counts={"a": 1}, epsilon=1.0, delta=1e-6, max_keys_per_user=1, weighting="per_user")
    with pytest.raises(ValueError, match="epsilon"):
        api.histogram(ROWS, epsilon=0, delta=1e-6, max_keys_per_user=1)
    with pytest.raises(ValueError, match="delta"):
        api.sample(ROWS, epsilon=1.0, delta=2.0, max_keys_per_user=1)
    with pytest.raises(ValueError, match="counts"):
        api.histogram(counts={"a": -1}, epsilon=1.0, delta=1e-6, max_keys_per_user=1)


def test_plan_reads_the_release_choice_table_and_names_the_call() -> None:
    from stream_dp.release.release_choice import recommend

    users = len({u for u, _ in ROWS})
    p = api.plan(ROWS, epsilon=1.0, max_keys_per_user=5, k=10)
    expected = recommend(max_keys_per_user=5, k=10, epsilon_w=1.0, known_domain=False, expected_users=users)
    assert p["method"] == expected.method and p["cell"] == expected.cell
    assert p["call"] in ("histogram", "topk") and callable(getattr(api, p["call"]))
    assert api.plan(epsilon=1.0, max_keys_per_user=5, expected_users=users, domain="partial")["cell"]["domain"] == \
        "partial"
    with pytest.raises(ValueError, match="domain"):
        api.plan(epsilon=1.0, max_keys_per_user=5, expected_users=10, domain="some")
    with pytest.raises(ValueError, match="expected_users"):
        api.plan(epsilon=1.0, max_keys_per_user=5)


def test_every_evaluated_method_has_a_call() -> None:
    from stream_dp.release.release_choice import METHODS

    assert set(METHODS) == set(api.CALLS)

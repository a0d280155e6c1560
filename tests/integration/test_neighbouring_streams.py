"""The whole subscriber view is a DP function of the stream (docs/privacy.md §1b): D vs D′ = D minus one user,
through the production ingest and release code on a real redis-server.

- structural part (windows, types, statuses, record count, budget scopes): identical for every scenario;
- statistical part: the audit's ε lower bound of the whole pipeline's output stays within the window's
  configured ε, and a deliberately broken variant -- the old index-driven schedule, which releases only
  windows that received events -- is flagged by both parts;
- regression tests for the three bugs of the end-to-end issue (window presence, a lying body time moving
  the watermark, wall-clock ``created_at``).
"""

from __future__ import annotations

import pytest

from stream_dp.accounting.composition import compose
from stream_dp.config import Config, config_from_mapping
from stream_dp.release.windows import Window, WindowReader
from tests.support.audit import audit_samples
from tests.support.neighbours import Scenario, StreamEvent, compare, run_in_process, scenarios

pytestmark = pytest.mark.integration

SIZE = 60
from event_times import T0  # noqa: E402 - near the present (Kafka 4 refuses future times)
DELTA_KEYS = 3


def harness_cfg(*, shards: int = 1, layout: str = "user", **releases: object) -> Config:
    base: dict[str, dict[str, object]] = {
        "topk": {"enabled": True, "k": 3, "k_bar": 10, "window_epsilon": 3.0, "window_delta": 2e-6},
        "alerts": {"enabled": True, "watchlist": ["x", "y"], "threshold": 2.0, "k": 3, "epsilon": 1.0},
        "sample": {"enabled": True, "window_epsilon": 1.0, "window_delta": 1e-6},
        "histogram": {"enabled": False},
    }
    for name, over in releases.items():
        base[name] = {**base.get(name, {}), **over}  # type: ignore[dict-item]
    return config_from_mapping({
        "windows": {"size_seconds": SIZE, "start": str(T0), "allowed_lateness_seconds": 0,
                    "max_event_delay_seconds": 0, "max_clock_skew_seconds": 5,
                    "idle_partition_timeout_seconds": 600, "retention_seconds": 600, "shards": shards,
                    "layout": layout},
        "contribution": {"max_keys_per_user": DELTA_KEYS},
        "budget": {"epsilon": 1e6, "delta": 0.5, "delta_prime": 1e-7, "period_seconds": 86400},
        "releases": base,
    }, environ={})


class IndexDrivenReader(WindowReader):
    """The schedule as it was before the end-to-end fix: only windows ingest indexed (= received events)
    are released. A deliberately broken variant, to show the harness and the audit catch it."""

    def closable(self, *, limit: int = 100, also=None, also_result=None) -> list[Window]:
        # (`also` is not sent: the worker then claims in two round trips, as it does without a guess)
        wm = self.global_watermark()
        if wm is None:
            return []
        starts = [int(s) for s in self.r.zrangebyscore(self.keys.windows_index(), "-inf", wm - self.size)]
        released = self.r.zmscore(self.keys.release_index("released"), [str(s) for s in starts]) if starts else []
        return [self.window(s) for s, done in zip(starts, released) if done is None][:limit]


def index_driven(worker, client):
    return IndexDrivenReader(client, keys=worker.keys, size_seconds=SIZE)


SCENARIOS = scenarios(size=SIZE, t0=T0, max_keys=DELTA_KEYS, skew=5)


#: (windows.layout, windows.shards) the harness runs: the user layout unsharded and split by user, and the key
#: layout (docs/design/key-sharded-counts.md) at S = 1, 2, 12.
LAYOUTS = [("user", 1), ("user", 2), ("key", 1), ("key", 2), ("key", 12)]
LAYOUT_IDS = ["one-shard", "two-shards", "key-1", "key-2", "key-12"]


@pytest.mark.parametrize("layout,shards", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_structure_is_identical_on_neighbouring_streams(redis_client, scenario: Scenario, layout: str,
                                                        shards: int) -> None:
    """``shards = 2``: each window stored in two shards (ingest splits by user, the release merges the shards'
    counts): the same view as with one. The key layout: counts in key shards (two-step apply, the release's
    drain, every type read per key shard): the same view."""
    cfg = harness_cfg(shards=shards, layout=layout)
    assert compare(scenario, cfg, redis_client, rng=1) == [], scenario.name
    # and the view is the schedule: every window from the start to the horizon, every type, in order
    view = run_in_process(scenario.stream(with_user=False), cfg, redis_client, rng=2,
                          partitions=scenario.partitions)
    due = [T0 + i * SIZE for i in range(int((scenario.horizon - T0) // SIZE))]
    assert [r[0] for r in view.structure().rows] == [s for s in due for _ in ("topk", "alerts", "sample")]
    assert {r[2] for r in view.structure().rows} == {"released"}


@pytest.mark.parametrize("layout,shards", [("user", 1), ("key", 12)], ids=["one-shard", "key-12"])
def test_the_broken_index_driven_schedule_is_caught_by_the_harness(redis_client, layout: str, shards: int) -> None:
    lone = SCENARIOS[0]
    diffs = compare(lone, harness_cfg(shards=shards, layout=layout), redis_client, rng=1, reader_factory=index_driven)
    assert diffs and any("only in D:" in d for d in diffs), diffs


def test_an_empty_window_is_released_with_every_type(redis_client) -> None:
    """Regression (window presence): a window without events is released like any other."""
    lone = SCENARIOS[0]
    view = run_in_process(lone.stream(with_user=False), harness_cfg(), redis_client, rng=3)
    empty = [r for r in view.records if r["window"]["start"] == T0 + SIZE]
    assert [r["type"] for r in empty] == ["topk", "alerts", "sample"]
    topk = empty[0]
    assert topk["status"] == "released" and topk["items"] == [] and topk["hit_bottom"] is True
    assert topk["cost"]["epsilon"] > 0  # the ⊥ outcome is charged like any other
    assert empty[2]["items"] == []


def test_created_at_is_the_window_end_not_the_wall_clock(redis_client) -> None:
    """Regression (timing): ``created_at`` is public (the window's end), whatever the window's size."""
    view = run_in_process(SCENARIOS[0].stream(), harness_cfg(), redis_client, rng=4)
    from datetime import datetime

    for r in view.records:
        at = datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")).timestamp()
        assert at == r["window"]["end"]


def test_a_lying_body_time_neither_moves_the_watermark_nor_drops_honest_events(redis_client) -> None:
    """Regression (untrusted event time): one event claiming a time a year ahead used to make every later
    honest event late. Now it is rejected against its record time; the honest windows are released."""
    year = 365 * 86400
    liar = [StreamEvent(T0 + 5, "liar", "z", body_time=T0 + 5 + year)]
    honest = [StreamEvent(T0 + SIZE * w + 1 + i, f"h{w}-{i}", "x") for w in range(3) for i in range(3)]
    scenario = Scenario("liar", tuple(liar + honest), "liar", horizon=T0 + 3 * SIZE)
    cfg = harness_cfg(topk={"window_epsilon": 50.0, "window_delta": 2e-3, "k": 1, "k_bar": 2})
    view = run_in_process(scenario.stream(), cfg, redis_client, rng=5)
    topk = [r for r in view.records if r["type"] == "topk"]
    assert [r["window"]["start"] for r in topk] == [T0, T0 + SIZE, T0 + 2 * SIZE]
    assert all([i["key"] for i in r["items"]] == ["x"] for r in topk)  # 3 honest users each: released at ε 50
    assert compare(scenario, cfg, redis_client, rng=6) == []


def _audit_views(scenario: Scenario, cfg: Config, client, trials: int, *, seed: int, **kwargs):
    import numpy as np

    gen = np.random.default_rng(seed)
    d = [run_in_process(scenario.stream(with_user=True), cfg, client, rng=gen, **kwargs).outcome()
         for _ in range(trials)]
    d_prime = [run_in_process(scenario.stream(with_user=False), cfg, client, rng=gen, **kwargs).outcome()
               for _ in range(trials)]
    return d, d_prime


def _window_epsilon(cfg: Config, client) -> tuple[float, float]:
    """Basic-composition (ε, δ) of one window's worst case over the enabled types."""
    from tests.support.neighbours import _Collected  # the same wiring as the harness
    from prometheus_client import CollectorRegistry

    from stream_dp.accounting.ledger import BudgetCap, Ledger
    from stream_dp.store.keys import Keys
    from stream_dp.release.metrics import ReleaseMetrics
    from stream_dp.release.outbox import Outbox
    from stream_dp.release.worker import ReleaseWorker

    keys = Keys("eps")
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys)
    metrics = ReleaseMetrics(CollectorRegistry())
    worker = ReleaseWorker(cfg, client, ledger, Outbox(ledger, _Collected(), metrics), metrics,  # type: ignore[arg-type]
                           worker_id="eps")
    spent = compose([e for events in worker.worst_case_events().values() for e in events])
    return spent.basic_epsilon, spent.basic_delta


@pytest.mark.slow
def test_audit_of_the_whole_pipeline_real_within_epsilon_broken_flagged(redis_client) -> None:
    """ε lower bounds of the pipeline's output law on two neighbouring pairs: within the window's ε for
    the production schedule; the index-driven schedule is flagged (it publishes a window only when u
    exists). Labels: every record's (window, type, status, released keys, ⊥ flag)."""
    cfg = harness_cfg(alerts={"enabled": False}, sample={"enabled": False},
                      topk={"k": 2, "k_bar": 3, "window_epsilon": 2.0, "window_delta": 2e-2})
    eps_w, delta_w = _window_epsilon(cfg, redis_client)
    trials = 300
    lone = SCENARIOS[0]
    real = audit_samples(*_audit_views(lone, cfg, redis_client, trials, seed=11), epsilon=eps_w, delta=delta_w)
    broken = audit_samples(*_audit_views(lone, cfg, redis_client, trials, seed=12, reader_factory=index_driven),
                           epsilon=eps_w, delta=delta_w)
    # u adds one user to the key at the top-k̄ boundary (the (k̄+1)-th count) of a crowded window
    crowd = [StreamEvent(T0 + 1 + i * 0.01, f"o{n}-{i}", key) for n, (key, c) in
             enumerate([("a", 12), ("b", 9), ("c", 6), ("d", 4)]) for i in range(c)]
    boundary = Scenario("u adds one key near the top-k̄ boundary",
                        tuple(crowd + [StreamEvent(T0 + 30, "u", "d")]), "u", horizon=T0 + SIZE)
    near = audit_samples(*_audit_views(boundary, cfg, redis_client, trials, seed=13), epsilon=eps_w,
                         delta=delta_w)
    print(f"\nwindow ε={eps_w:g} δ={delta_w:g}, {trials} runs per stream")
    for name, res in (("u alone, production", real), ("u alone, index-driven (broken)", broken),
                      ("u at the top-k̄ boundary, production", near)):
        print(f"{name}: {res.summary()}")
    assert not real.violated, real.summary()
    assert not near.violated, near.summary()
    assert broken.violated, broken.summary()
    # the boundary pair is not vacuous: the released outcome varies between runs
    assert len({o for o in _audit_views(boundary, cfg, redis_client, 40, seed=14)[0]}) > 1


@pytest.mark.parametrize("calibration,layout,shards", [("zcdp", "user", 1), ("exact", "user", 1), ("zcdp", "key", 2),
                                                      ("exact", "key", 12)])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_histogram_structure_is_identical_on_neighbouring_streams(redis_client, scenario: Scenario,
                                                                   calibration: str, layout: str, shards: int) -> None:
    """The histogram release (issue 18) on every neighbouring pair, with either calibration (§8, §8c): same
    windows, statuses and charges (the calibration is public config); an empty window is a released (charged)
    empty histogram. Also in the key layout (the window read as its key shards concatenated)."""
    cfg = harness_cfg(shards=shards, layout=layout, topk={"enabled": False}, alerts={"enabled": False}, sample={"enabled": False},
                      histogram={"enabled": True, "window_epsilon": 1.0, "window_delta": 2e-6, "calibration": calibration})
    assert compare(scenario, cfg, redis_client, rng=5) == [], scenario.name
    view = run_in_process(scenario.stream(with_user=False), cfg, redis_client, rng=6,
                          partitions=scenario.partitions)
    due = [T0 + i * SIZE for i in range(int((scenario.horizon - T0) // SIZE))]
    assert [r[0] for r in view.structure().rows] == due
    assert all(r["type"] == "histogram" and r["status"] == "released" and r["cost"]["rho"] > 0
               for r in view.records)


@pytest.mark.parametrize("layout,shards", [("user", 1), ("user", 2), ("key", 2), ("key", 12)],
                         ids=["one-shard", "two-shards", "key-2", "key-12"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_argmax_structure_is_identical_on_neighbouring_streams(redis_client, scenario: Scenario, layout: str,
                                                               shards: int) -> None:
    """The argmax release (large margin, CHS14 Algorithm 1), which reads the window's sorted prefix only as
    far as its search goes (release/argmax_prefix.py): the same windows, statuses, fields and charges on every
    neighbouring pair, in both layouts; an empty window is a released (charged) record with no clear winner."""
    cfg = harness_cfg(shards=shards, layout=layout, topk={"enabled": False}, alerts={"enabled": False},
                      sample={"enabled": False}, argmax={"enabled": True, "window_epsilon": 2.0, "window_delta": 1e-6})
    assert compare(scenario, cfg, redis_client, rng=9) == [], scenario.name
    view = run_in_process(scenario.stream(with_user=False), cfg, redis_client, rng=10,
                          partitions=scenario.partitions)
    due = [T0 + i * SIZE for i in range(int((scenario.horizon - T0) // SIZE))]
    assert [r[0] for r in view.structure().rows] == due
    assert all(r["type"] == "argmax" and r["status"] == "released" and r["mechanism"]["name"] == "large_margin"
               and len(r["items"]) <= 1 for r in view.records)


@pytest.mark.parametrize("layout,shards", [("user", 1), ("user", 2), ("key", 12)], ids=["one-shard", "two-shards", "key-12"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_weighted_histogram_structure_is_identical_on_neighbouring_streams(redis_client, scenario: Scenario,
                                                                          layout: str, shards: int) -> None:
    """The per-user weighted histogram (§8d) reads the windows' bounding logs, not their counts: the same
    windows, statuses and charges on every neighbouring pair, with one shard and with two (a user's pairs
    are in her shard; the scores add over shards)."""
    cfg = harness_cfg(shards=shards, layout=layout, topk={"enabled": False}, alerts={"enabled": False},
                      sample={"enabled": False},
                      histogram={"enabled": True, "window_epsilon": 1.0, "window_delta": 2e-6, "weighting": "per_user"})
    assert compare(scenario, cfg, redis_client, rng=7) == [], scenario.name
    view = run_in_process(scenario.stream(with_user=False), cfg, redis_client, rng=8,
                          partitions=scenario.partitions)
    due = [T0 + i * SIZE for i in range(int((scenario.horizon - T0) // SIZE))]
    assert [r[0] for r in view.structure().rows] == due
    assert all(r["mechanism"]["name"] == "weighted_histogram" and r["status"] == "released"
               and r["mechanism"]["parameters"]["weighting"] == "per_user" for r in view.records)


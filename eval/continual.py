"""Experiment 2: continual release over a replayed stream, through the production code path in-process.

A replay goes through the same functions the workers run, against a real redis-server:

1. **ingest** -- :class:`stream_dp.ingest.store.WindowStore`: every event (offset order = event-time order,
   one partition) is bounded and counted per event-time window by the production planner and apply
   script; then the global watermark is advanced past the last window, which closes every window;
2. **release** -- :class:`stream_dp.release.worker.ReleaseWorker` with the real
   :class:`~stream_dp.accounting.ledger.Ledger` and :class:`~stream_dp.release.outbox.Outbox`: each closed
   window, oldest first, is reserved in the ledger, released, settled (pay-what-you-get) and published.
   Only the Kafka producer is replaced by an in-memory one that keeps the published records.

The published top-k records are scored against the true bounded top-k of each window (computed
independently by :func:`eval.data.window_histograms`, and checked against what ingest wrote to Redis):
per-window precision@k / recall@k, the ledger's ε spent in the budget scope after each window, and how
many windows were released before the period cap refused one. Each replay uses a fresh Redis database and
a different release seed; results are averaged over replays.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis
from prometheus_client import CollectorRegistry

from stream_dp.accounting.budget import BudgetCap, decide, reported_epsilon
from stream_dp.accounting.composition import compose
from stream_dp.accounting.ledger import Ledger
from stream_dp.config import Config, load_config
from stream_dp.ingest.store import Chunk, WindowStore
from stream_dp.store.keys import Keys
from stream_dp.mechanisms import LimitedDomainTopk
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox, Publisher
from stream_dp.release.window_budget import configured_topk
from stream_dp.release.worker import ReleaseWorker

from eval.data import Histogram, Stream, window_histograms
from eval.metrics import Estimate, release_metrics

APPLY_BATCH = 4000  # events per ingest apply round trip


@dataclass(frozen=True)
class ContinualSetup:
    """One continual-release configuration: the default config plus these overrides (env-style names)."""

    name: str
    window_seconds: int
    period_seconds: int
    overrides: dict[str, str] = field(default_factory=dict)
    release_type: str = "topk"  # the release scored: "topk" or "histogram" (its top k by noisy count)

    def config(self, redis_url: str, prefix: str, *, start: int | None = None) -> Config:
        """The setup's config; ``start``: the public release schedule's first window (the stream's)."""
        env = {
            "STREAM_DP_REDIS__URL": redis_url,
            "STREAM_DP_REDIS__KEY_PREFIX": prefix,
            "STREAM_DP_WINDOWS__SIZE_SECONDS": str(self.window_seconds),
            "STREAM_DP_BUDGET__PERIOD_SECONDS": str(self.period_seconds),
            "STREAM_DP_RELEASES__ALERTS__ENABLED": "false",
            "STREAM_DP_RELEASES__SAMPLE__ENABLED": "false",
            "STREAM_DP_RELEASES__ARGMAX__ENABLED": "false",
            "STREAM_DP_RELEASES__WATCH_TOPK__ENABLED": "false",
            # the scored type only, whatever the defaults enable
            "STREAM_DP_RELEASES__TOPK__ENABLED": str(self.release_type == "topk").lower(),
            "STREAM_DP_RELEASES__HISTOGRAM__ENABLED": str(self.release_type == "histogram").lower(),
            "STREAM_DP_METRICS__PORT": "0",
        }
        if start is not None:
            env["STREAM_DP_WINDOWS__START"] = str(start)
        env.update(self.overrides)
        return load_config(environ=env)


class MemoryProducer:
    """Stands in for the Kafka producer: keeps every published record (the releases topic's content)."""

    class _Sent:
        def get(self, timeout: float | None = None) -> None:
            return None

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def send(self, topic: str, *, key: bytes, value: bytes) -> "MemoryProducer._Sent":
        self.records.append(json.loads(value))
        return self._Sent()

    def close(self) -> None:
        pass


def ingest_stream(stream: Stream, client: redis.Redis, cfg: Config) -> WindowStore:
    """Apply the whole stream with ingest's store (partition 0, offset = position) and close all windows."""
    size = cfg.windows.size_seconds
    store = WindowStore(client, keys=Keys(cfg.redis.key_prefix), window_size=size,
                        unit=cfg.contribution.unit, max_keys_per_user=cfg.contribution.max_keys_per_user)
    starts = stream.ts - stream.ts % size
    store.register_windows(int(s) for s in np.unique(starts))
    users = stream.user.astype(str)
    keys = stream.key_labels[stream.key].astype(str)
    for lo in range(0, len(stream), APPLY_BATCH):
        hi = min(lo + APPLY_BATCH, len(stream))
        chunks = []
        batch_starts = starts[lo:hi]
        for s in np.unique(batch_starts):
            idx = lo + np.flatnonzero(batch_starts == s)
            chunks.append(Chunk.of(int(s), 0, [(int(i), users[i], keys[i]) for i in idx]))
        store.apply(chunks, closed_through=None)
    end = float(starts.max() + size) if len(stream) else 0.0
    store.advance_watermark({0: (end, False)}, known_partitions=[0], idle_timeout=3600.0, now=end)
    return store


def release_all(cfg: Config, client: redis.Redis, *, seed: int, max_windows: int = 100_000) -> list[dict[str, Any]]:
    """Run the release worker in-process until no closed window is left; the published records."""
    keys = Keys(cfg.redis.key_prefix)
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys,
                    lifetime_cap=BudgetCap.lifetime_from_config(cfg.budget))
    producer = MemoryProducer()
    metrics = ReleaseMetrics(CollectorRegistry())
    outbox = Outbox(ledger, Publisher(producer, cfg.kafka.releases_topic), metrics)
    worker = ReleaseWorker(cfg, client, ledger, outbox, metrics, worker_id="eval", rng=seed)
    for _ in range(max_windows):
        if worker.run_once() is None:
            break
    return producer.records


def one_release_worst_case(cfg: Config, release_type: str = "topk") -> list[Any]:
    """The events the ledger reserves for one release of ``release_type`` (the builder's own worst case)."""
    from stream_dp.release.types import BUILDERS

    return list(BUILDERS[release_type](cfg).measurement.privacy_map())


def worst_case_windows_per_period(cfg: Config, release_type: str = "topk") -> int:
    """How many windows one period admits if every release were charged its worst case (for top-k: k
    outcomes, the counterfactual without pay-what-you-get), by the ledger's own cap rule."""
    cap = BudgetCap.from_config(cfg.budget)
    events = one_release_worst_case(cfg, release_type)
    n = 0
    while decide(compose(events * (n + 1)), cap) == "ok" and n < 1_000_000:
        n += 1
    return n


def _worst_case_curve(starts: Sequence[int], scope_of: dict[int, str], cfg: Config,
                      release_type: str = "topk") -> dict[int, float]:
    """The scope's reported ε after each window had every release been charged its worst case (top-k: k
    outcomes, the counterfactual without pay-what-you-get); a window that would not fit adds nothing."""
    cap = BudgetCap.from_config(cfg.budget)
    one = one_release_worst_case(cfg, release_type)
    charged: dict[str, int] = {}
    out = {}
    for start in starts:
        scope = scope_of[start]
        n = charged.get(scope, 0)
        if decide(compose(one * (n + 1)), cap) == "ok":
            n += 1
        charged[scope] = n
        out[start] = reported_epsilon(compose(one * n), cap.delta_prime) if n else 0.0
    return out


def _window_users(stream: Stream, size: int) -> dict[int, int]:
    starts = stream.ts - stream.ts % size
    pairs = np.unique(np.stack([starts, stream.user]), axis=1)
    s, c = np.unique(pairs[0], return_counts=True)
    return {int(a): int(b) for a, b in zip(s, c)}


def run_continual(stream: Stream, setup: ContinualSetup, redis_url: str, *, runs: int, seed: int
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Ingest ``stream`` once, then release every window ``runs`` times (each on a copy of the ingested
    keys, with its own ledger and release seed); per-window rows averaged over runs, and a summary row."""
    probe = setup.config(redis_url, "probe")
    size, k = probe.windows.size_seconds, probe.releases.topk.k
    # the schedule starts at the stream's first window (the evaluation's public start); windows without
    # events inside the stream's span are released too, with an empty truth
    first = int(stream.ts.min() - stream.ts.min() % size) if len(stream) else None
    truth = window_histograms(stream, probe.contribution.max_keys_per_user, size)
    if truth:
        empty = Histogram.from_arrays(np.arange(stream.universe), np.zeros(stream.universe, dtype=np.int64),
                                      stream.universe)
        for start in range(min(truth), max(truth) + size, size):
            truth.setdefault(start, empty)
    users = _window_users(stream, size)
    label_to_id = {str(label): i for i, label in enumerate(stream.key_labels)}
    per_window: dict[int, dict[str, list[float]]] = {}
    scope_of: dict[int, str] = {}
    refused_runs: list[int] = []
    client = redis.Redis.from_url(redis_url)
    base = f"evalbase{seed}"
    try:
        _delete_prefix(client, base)
        store = ingest_stream(stream, client, setup.config(redis_url, base, start=first))
        _check_counts(store, truth, stream.key_labels)
        all_records = []
        for r in range(runs):
            prefix = f"evalrun{seed}x{r}"
            _copy_prefix(client, base, prefix)
            cfg = setup.config(redis_url, prefix, start=first)
            all_records.append([rec for rec in release_all(cfg, client, seed=seed + r)
                                if rec["type"] == setup.release_type])
            _delete_prefix(client, prefix)
        _delete_prefix(client, base)
    finally:
        client.close()
    for records in all_records:
        refused = 0
        for rec in sorted(records, key=lambda x: x["window"]["start"]):
            start = int(rec["window"]["start"])
            scope_of[start] = rec["budget"]["scope"]
            released = rec["status"] == "released"
            refused += not released
            keys = [label_to_id[item["key"]] for item in rec["items"][:k]]  # ranked best first
            row = -np.ones((1, k), dtype=np.int64)
            row[0, :len(keys)] = keys
            m = release_metrics(row, truth[start], k)
            acc = per_window.setdefault(start, {n: [] for n in ("precision", "recall", "keys", "released",
                                                                "hit_bottom", "epsilon_spent", "rho")})
            acc["precision"].append(float(m["precision"][0]))
            acc["recall"].append(float(m["recall"][0]))
            acc["keys"].append(float(m["keys"][0]))
            acc["released"].append(float(released))
            acc["hit_bottom"].append(float(bool(rec.get("hit_bottom"))))
            acc["epsilon_spent"].append(float(rec["budget"]["epsilon_spent"]))
            acc["rho"].append(float(rec["cost"]["rho"]))
        refused_runs.append(refused)
    worst = _worst_case_curve(sorted(per_window), scope_of, probe, setup.release_type)
    rows = []
    for i, start in enumerate(sorted(per_window)):
        acc = per_window[start]
        row: dict[str, Any] = {"setup": setup.name, "window_index": i, "window_start": start,
                               "scope": scope_of[start], "users": users.get(start, 0),
                               "true_kth_count": truth[start].kth(k), "true_top_count": truth[start].kth(1),
                               "runs": len(acc["recall"]), "epsilon_spent_if_worst_case": worst[start]}
        for name in ("precision", "recall", "keys", "released", "hit_bottom", "epsilon_spent", "rho"):
            est = Estimate.of(np.array(acc[name]))
            row[f"{name}_mean"], row[f"{name}_ci95"] = est.mean, est.half_width
        rows.append(row)
    summary = _summary(setup, rows, probe, refused_runs, runs)
    summary["windows_in_stream"] = len(truth)
    summary["windows_never_released"] = len(set(truth) - set(per_window))
    return rows, summary


def _summary(setup: ContinualSetup, rows: Sequence[dict[str, Any]], cfg: Config, refused_runs: list[int],
             runs: int) -> dict[str, Any]:
    t, b = cfg.releases.topk, cfg.budget
    scopes = sorted({r["scope"] for r in rows})
    per_scope_released = [sum(r["released_mean"] for r in rows if r["scope"] == s) for s in scopes]
    max_windows = max(sum(1 for r in rows if r["scope"] == s) for s in scopes) if scopes else 0
    recall = Estimate.of(np.array([r["recall_mean"] for r in rows]))
    released = [r for r in rows if r["released_mean"] > 0]
    per_outcome = configured_topk(t, max_keys_per_user=cfg.contribution.max_keys_per_user)  # the worker's (no domain)
    eps_outcome, delta_bottom = per_outcome.epsilon, per_outcome.delta
    one_outcome = compose(LimitedDomainTopk(k=1, k_bar=t.k_bar, epsilon=eps_outcome, delta=delta_bottom,
                                              max_keys_per_user=1).privacy_map())
    one_release = compose(one_release_worst_case(cfg, setup.release_type))
    return {
        "setup": setup.name, "release_type": setup.release_type,
        "window_seconds": setup.window_seconds, "period_seconds": setup.period_seconds,
        "k": t.k, "k_bar": t.k_bar, "epsilon_per_outcome": eps_outcome, "delta_bottom": delta_bottom,
        "max_keys_per_user": cfg.contribution.max_keys_per_user, "cap_epsilon": b.epsilon, "cap_delta": b.delta,
        "delta_prime": b.delta_prime, "runs": runs, "windows": len(rows), "periods": len(scopes),
        "max_windows_in_a_period": max_windows,
        "windows_released_mean": float(sum(r["released_mean"] for r in rows)),
        "windows_refused_mean": float(np.mean(refused_runs)) if refused_runs else 0.0,
        "max_released_in_a_period": float(max(per_scope_released)) if per_scope_released else 0.0,
        "worst_case_windows_per_period": worst_case_windows_per_period(cfg, setup.release_type),
        "delta_cap_releases_per_period": int((b.delta - b.delta_prime) / one_release.zcdp_delta + 1e-9),
        "bottom_offset": 1.0 + math.log(min(cfg.contribution.max_keys_per_user, t.k_bar) / delta_bottom) / eps_outcome,
        "mean_recall_over_windows": recall.mean, "mean_recall_ci95": recall.half_width,
        "windows_with_any_key_fraction": float(np.mean([r["keys_mean"] > 0 for r in rows])) if rows else 0.0,
        "hit_bottom_fraction": float(np.mean([r["hit_bottom_mean"] for r in released])) if released else 0.0,
        "epsilon_of_one_outcome": reported_epsilon(one_outcome, b.delta_prime),
        "median_users_per_window": float(np.median([r["users"] for r in rows])) if rows else 0.0,
    }


def _check_counts(store: WindowStore, truth: dict[int, Histogram], labels: np.ndarray) -> None:
    """What ingest wrote to Redis equals the independent bounded counts (else the evaluation is void)."""
    for start, hist in truth.items():
        want = {str(labels[key]): int(c) for key, c in zip(hist.keys, hist.counts)}
        if store.counts(start) != want:
            raise AssertionError(f"window {start}: ingest's counts differ from the independent bounding")


def _copy_prefix(client: redis.Redis, source: str, target: str) -> None:
    """Copy every key under ``source:`` to ``target:`` (DUMP/RESTORE, so any Redis version works)."""
    names = list(client.scan_iter(match=f"{source}:*", count=1000))
    for lo in range(0, len(names), 500):
        part = names[lo:lo + 500]
        pipe = client.pipeline(transaction=False)
        for name in part:
            pipe.dump(name)
        dumps = pipe.execute()
        pipe = client.pipeline(transaction=False)
        for name, blob in zip(part, dumps):
            if blob is not None:
                pipe.restore(target.encode() + name[len(source):], 0, blob, replace=True)
        pipe.execute()


def _delete_prefix(client: redis.Redis, prefix: str) -> None:
    """Remove a replay's keys (its own prefix) so the next replay starts empty."""
    batch = []
    for name in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(name)
        if len(batch) >= 1000:
            client.delete(*batch)
            batch = []
    if batch:
        client.delete(*batch)

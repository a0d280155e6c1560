"""Neighbouring-stream harness: the production pipeline on D and on D′ = D minus one user, compared as a
subscriber of the releases topic sees them (docs/privacy.md §1b).

A subscriber observes records, their order, their statuses, costs and budget blocks. The **structural**
part of that view -- which windows, which release types, which statuses, how many records, which budget
scopes -- must not depend on the data at all (it is fixed by the public schedule and by earlier DP
outputs), so it must be *identical* on D and D′ for every scenario. The values inside the records are DP
outputs; their distributions are compared with :mod:`tests.support.audit` over many runs
(:func:`run_in_process` is cheap enough for that).

Streams are lists of :class:`StreamEvent` (a Kafka record: partition, record timestamp, and the body's
user, key and optional event time; ``user=None`` is a clock tick, a null-value record). Every scenario
ends with clock ticks on every partition at a public ``horizon``, as a collector or ``stream-dp replay``
sends them, so both streams reach the same watermark however their last events differ.

Two ways to run a stream, both on production code:

- :func:`run_in_process`: the ingest applier (:class:`~stream_dp.ingest.applier.BatchApplier`: decode,
  trusted clock, window, bound, apply, watermark) and the release worker
  (:class:`~stream_dp.release.worker.ReleaseWorker`: schedule, ledger, mechanisms, outbox) on one Redis,
  records collected from the outbox instead of a broker;
- the integration tests run the same scenarios through real worker processes (CLI, real broker, real
  redis-server) with :func:`produce_stream` and :func:`subscriber_view`.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stream_dp.config import Config
from stream_dp.schedule import record_timestamp_ms

#: A key prefix per run keeps runs on one Redis apart.
RUN_PREFIX = "nb"


@dataclass(frozen=True)
class StreamEvent:
    """One record of the events topic: its partition and record timestamp (seconds, the trusted clock),
    and the body (``user=None``: a clock tick, i.e. a record with a null value)."""

    record_time: float
    user: str | None = None
    key: str | None = None
    body_time: float | None = None
    partition: int = 0

    def value(self, cfg: Config) -> bytes | None:
        """The record value as a producer sends it (None for a clock tick)."""
        if self.user is None:
            return None
        body: dict[str, Any] = {cfg.events.user_field: self.user, cfg.events.key_field: self.key}
        if self.body_time is not None:
            body[cfg.events.time_field] = self.body_time
        return json.dumps(body).encode()


def ticks(at: float, partitions: int) -> list[StreamEvent]:
    """Clock ticks at record time ``at`` on every partition (the public end of a stream)."""
    return [StreamEvent(at, partition=p) for p in range(partitions)]


@dataclass(frozen=True)
class Scenario:
    """A stream D, the user whose events D′ lacks, and the stream's partitions (ticks at the horizon
    are appended by :meth:`stream`)."""

    name: str
    events: tuple[StreamEvent, ...]
    user: str
    horizon: float
    partitions: int = 1

    def stream(self, *, with_user: bool = True) -> list[StreamEvent]:
        """D (``with_user``) or D′, in production order, ending with ticks at the horizon."""
        body = [e for e in self.events if with_user or e.user != self.user]
        return body + ticks(self.horizon, self.partitions)


@dataclass(frozen=True)
class View:
    """What a subscriber read, in order."""

    records: tuple[dict[str, Any], ...]

    def structure(self) -> "Structure":
        return Structure(
            rows=tuple((r["window"]["start"], r["type"], r["status"]) for r in self.records),
            scopes=tuple(sorted({r["budget"]["scope"] for r in self.records if "budget" in r})),
        )

    def outcome(self) -> tuple:
        """The DP outputs that matter for top-k style audits: per record, the released keys and ⊥ flag."""
        return tuple((r["window"]["start"], r["type"], r["status"], tuple(i.get("key") for i in r["items"]),
                      r.get("hit_bottom")) for r in self.records)


@dataclass(frozen=True)
class Structure:
    """The data-independent part of a view: (window start, type, status) per record, in order, and the
    budget scopes the records name. The record count is ``len(rows)``."""

    rows: tuple[tuple[int, str, str], ...]
    scopes: tuple[str, ...] = field(default=())

    def differences(self, other: "Structure") -> list[str]:
        """Human-readable differences (empty when identical)."""
        out = []
        if len(self.rows) != len(other.rows):
            out.append(f"{len(self.rows)} records vs {len(other.rows)}")
        mine, theirs = set(self.rows), set(other.rows)
        out += [f"only in D: {row}" for row in sorted(mine - theirs)]
        out += [f"only in D′: {row}" for row in sorted(theirs - mine)]
        if not out and self.rows != other.rows:
            out.append("same records in another order")
        if self.scopes != other.scopes:
            out.append(f"budget scopes {self.scopes} vs {other.scopes}")
        return out


class _Collected:
    """A publisher that keeps what the outbox publishes (the subscriber's view, in order)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def publish(self, record: dict[str, Any]) -> None:
        self.records.append(json.loads(json.dumps(record)))

    def close(self) -> None:
        pass


def _batches(events: Sequence[StreamEvent], size: int) -> Iterable[list[tuple[int, StreamEvent]]]:
    """Events with their offsets (per partition, in production order), cut into poll-sized batches."""
    offsets: dict[int, int] = {}
    numbered = []
    for e in events:
        numbered.append((offsets.get(e.partition, 0), e))
        offsets[e.partition] = offsets.get(e.partition, 0) + 1
    for i in range(0, len(numbered), size):
        yield numbered[i:i + size]


def run_in_process(events: Sequence[StreamEvent], cfg: Config, client: Any, *, rng: Any = None,
                   partitions: int = 1, batch_size: int = 4,
                   reader_factory: Callable[[Any, Any], Any] | None = None,
                   worker_hook: Callable[[Any], None] | None = None) -> View:
    """Ingest ``events`` with the production applier and release every due window with the production
    release worker, under a fresh key prefix on ``client``; the records a subscriber would read.

    ``reader_factory(worker, client)`` replaces the release worker's window reader (to show that a broken
    schedule is caught); ``worker_hook(worker)`` changes the worker before it runs (to show that a broken
    released domain is caught); production never passes either.
    """
    from stream_dp.ingest.applier import BatchApplier, BatchRequest, PartitionRecords

    prefix = f"{RUN_PREFIX}{uuid.uuid4().hex[:12]}"
    cfg = cfg.replace(redis=dataclasses.replace(cfg.redis, key_prefix=prefix))
    applier = BatchApplier(cfg, client)
    everything = frozenset(range(partitions))
    try:
        for batch in _batches(events, batch_size):
            parts: dict[int, tuple[list[int], list[int | None], list[bytes | None]]] = {}
            for off, e in batch:
                cols = parts.setdefault(e.partition, ([], [], []))
                cols[0].append(off)
                cols[1].append(record_timestamp_ms(e.record_time))
                cols[2].append(e.value(cfg))
            records = [PartitionRecords(p, *cols) for p, cols in sorted(parts.items())]
            out = applier.apply_one(BatchRequest(records, owned=everything, busy=frozenset(parts),
                                                 known=everything, caught_up=everything - frozenset(parts)))
            if out.failure is not None:  # pragma: no cover - apply_one raises instead
                raise RuntimeError(out.failure.message)
    finally:
        applier.close()
    view = release_in_process(cfg, client, rng=rng, reader_factory=reader_factory, worker_hook=worker_hook)
    _drop_prefix(client, prefix)
    return view


def release_in_process(cfg: Config, client: Any, *, rng: Any = None,
                       reader_factory: Callable[[Any, Any], Any] | None = None,
                       worker_hook: Callable[[Any], None] | None = None) -> View:
    """Release every due window of ``cfg``'s deployment (its ``redis.key_prefix``) with the production release
    worker, in process, until none is due; the records a subscriber would read (``reader_factory`` and
    ``worker_hook``: as :func:`run_in_process`'s)."""
    from prometheus_client import CollectorRegistry

    from stream_dp.accounting.ledger import BudgetCap, Ledger
    from stream_dp.store.keys import Keys
    from stream_dp.release.metrics import ReleaseMetrics
    from stream_dp.release.outbox import Outbox
    from stream_dp.release.worker import ReleaseWorker

    keys = Keys(cfg.redis.key_prefix)
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys,
                    lifetime_cap=BudgetCap.lifetime_from_config(cfg.budget))
    metrics = ReleaseMetrics(CollectorRegistry())
    published = _Collected()
    worker = ReleaseWorker(cfg, client, ledger, Outbox(ledger, published, metrics), metrics,  # type: ignore[arg-type]
                           worker_id="harness", rng=rng)
    if reader_factory is not None:
        worker.reader = reader_factory(worker, client)
    if worker_hook is not None:
        worker_hook(worker)
    for _ in range(10_000):
        if worker.run_once() is None:
            break
    else:  # pragma: no cover
        raise RuntimeError("the release worker did not settle within 10,000 passes")
    return View(tuple(published.records))


def produce_stream(events: Sequence[StreamEvent], cfg: Config, producer: Any, topic: str) -> None:
    """Send a stream to the events topic as a collector would: each record to its partition, keyed by user,
    stamped with its record time; clock ticks as null values. ``producer``: a kafka-python KafkaProducer."""
    for e in events:
        producer.send(topic, partition=e.partition, key=b"clock" if e.user is None else e.user.encode(),
                      value=e.value(cfg), timestamp_ms=record_timestamp_ms(e.record_time))
    producer.flush()


def subscriber_view(messages: Iterable[bytes]) -> View:
    """The view of a subscriber that read these release messages in order, each release once (a record
    republished after a restart is byte-identical, docs/privacy.md §4, and is shown once)."""
    seen: set[str] = set()
    records = []
    for raw in messages:
        rec = json.loads(raw)
        if rec["release_id"] not in seen:
            seen.add(rec["release_id"])
            records.append(rec)
    return View(tuple(records))


def _drop_prefix(client: Any, prefix: str) -> None:
    for name in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(name)


def compare(scenario: Scenario, cfg: Config, client: Any, *, rng: Any = None, **kwargs: Any) -> list[str]:
    """Run D and D′ in process; the structural differences (empty: identical)."""
    d = run_in_process(scenario.stream(with_user=True), cfg, client, rng=rng, partitions=scenario.partitions,
                       **kwargs)
    d_prime = run_in_process(scenario.stream(with_user=False), cfg, client, rng=rng,
                             partitions=scenario.partitions, **kwargs)
    return d.structure().differences(d_prime.structure())


# --- the scenarios of the end-to-end issue -------------------------------------------------------------

def scenarios(*, size: int, t0: int, max_keys: int, skew: float) -> list[Scenario]:
    """The standard neighbouring pairs over windows ``[t0 + i·size, …)`` (``t0`` a schedule start).

    Each has other users in several windows and the user ``u`` placed where a schedule or clock that
    depends on the data would show it.
    """
    def crowd(window: int, users: Sequence[str], keys: Sequence[str], partition: int = 0) -> list[StreamEvent]:
        base = t0 + window * size
        return [StreamEvent(base + 1 + i, u, keys[i % len(keys)], partition=partition)
                for i, u in enumerate(users)]

    def at(window: int, offset: float) -> float:
        return t0 + window * size + offset

    others = ["a", "b", "c", "d"]
    year = 365 * 86400
    out = [
        Scenario("u alone in a window between others",
                 tuple(crowd(0, others, ["x", "y"]) + [StreamEvent(at(1, 5), "u", "z")]
                       + crowd(2, others, ["x", "y"])), "u", horizon=at(4, 0)),
        Scenario("u with a far-future body time",
                 tuple(crowd(0, others, ["x"]) + [StreamEvent(at(0, 9), "u", "z", body_time=at(0, 9) + year)]
                       + crowd(1, others, ["x"])), "u", horizon=at(3, 0)),
        Scenario("u with a far-past body time",
                 tuple(crowd(0, others, ["x"]) + [StreamEvent(at(1, 9), "u", "z", body_time=at(1, 9) - year)]
                       + crowd(1, others, ["y"])), "u", horizon=at(3, 0)),
        Scenario("u as the first user of the stream",
                 tuple([StreamEvent(at(0, 1), "u", "z")] + crowd(1, others, ["x"]) + crowd(2, others, ["y"])),
                 "u", horizon=at(4, 0)),
        Scenario("u as the last user of the stream",
                 tuple(crowd(0, others, ["x"]) + crowd(1, others, ["y"]) + [StreamEvent(at(3, size - 2), "u", "z")]),
                 "u", horizon=at(5, 0)),
        Scenario(f"u with Δ+10 keys (Δ={max_keys})",
                 tuple(crowd(0, others, ["x"]) + [StreamEvent(at(1, 2 + i * 0.01), "u", f"k{i}")
                                                  for i in range(max_keys + 10)] + crowd(1, others, ["y"])),
                 "u", horizon=at(3, 0)),
        Scenario("u spread over two partitions",
                 tuple(crowd(0, others[:2], ["x"], 0) + crowd(0, others[2:], ["x"], 1)
                       + [StreamEvent(at(1, 3), "u", "z", partition=0), StreamEvent(at(1, 4), "u", "w", partition=1)]
                       + crowd(2, others[:2], ["y"], 0) + crowd(2, others[2:], ["y"], 1)),
                 "u", horizon=at(4, 0), partitions=2),
        Scenario("an empty stretch of several windows, u inside it",
                 tuple(crowd(0, others, ["x"]) + [StreamEvent(at(3, 7), "u", "z")] + crowd(6, others, ["y"])),
                 "u", horizon=at(8, 0)),
        Scenario("u's body time at the edge of the allowed clock skew",
                 tuple(crowd(0, others, ["x"]) + [StreamEvent(at(1, 0) - skew / 2, "u", "z", body_time=at(1, 0) + 1)]
                       + crowd(1, others, ["x"])), "u", horizon=at(3, 0)),
    ]
    return out


def released_domain_scenario(*, size: int, t0: int, crowd: int) -> Scenario:
    """u is the (``crowd`` + 1)-th user of key ``z`` in window 0 and ``z`` has no user after it: with ``crowd`` + 1
    at a release's threshold, u's presence decides whether window 0 publishes ``z``, and so -- with a released
    domain (docs/privacy.md §10) -- whether the later windows track it. Window 1 has other users on another key."""
    w0 = [StreamEvent(t0 + 1 + i * 0.01, f"o{i}", "z") for i in range(crowd)] + [StreamEvent(t0 + 30, "u", "z")]
    w1 = [StreamEvent(t0 + size + 1 + i * 0.01, f"p{i}", "y") for i in range(3)]
    return Scenario("u decides whether window 0 publishes a key the next windows track", tuple(w0 + w1), "u",
                    horizon=t0 + 3 * size)

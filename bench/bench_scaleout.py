"""Ingest scale-out: N ingest worker processes in one consumer group, events/s per N against one redis-server
and against a 3-master Redis Cluster; N = 1 of the same run is the baseline.

The broker (``--broker kafka``, the default: Apache Kafka in KRaft mode, what deployments run; or ``tansu``,
the embedded dev broker) gets one topic of ``--events`` JSON events over ``--partitions`` partitions, keyed
by user (:func:`bench.bench_ingest.synthetic_events`: ``--users`` users, Zipf keys, four hourly windows of
event time a day or two ago), **produced before any worker starts**, so producing is not measured. Then, for
each Redis (``--redis single|cluster|both``) and each N of ``--workers``:

1. Redis is emptied and N real worker processes start -- ``python -m workers.ingest``, the same entry point
   as ``stream-dp ingest``, each a loop and an applier process -- in a consumer group of their own;
2. the group is **settled** when the broker describes it as stable with N members whose assignments
   partition the topic's partitions, and the workers' own ``stream_dp_ingest_partitions_assigned`` agree
   (:func:`settled`; polled, with a deadline);
3. the **rate** is the events done after that moment (counted, bounded, late or rejected: the workers'
   /metrics, summed) over the time from it to the first scrape that saw every event done (with a
   deadline). The events the first workers did while the others were still joining are not in it
   (``measured_share`` says how much was left to measure; a run below ``--min-measured-share``, 0.5 by
   default, is refused: use more ``--events``);
4. the workers are stopped (SIGTERM: finish the batch, commit, exit 0) and **the counts in Redis are
   checked against the oracle** (:mod:`tests.support.bounding_oracle`, written apart from production's
   bounding code): every window's count of every key, summed over its shards. A run that counts wrong
   fails the benchmark -- its rate would be worthless.

Reported per N: events/s, the ratio to N = 1 on the same Redis, the per-worker efficiency (ratio / N),
the seconds from start to settled, the share measured, the workers' CPU seconds per 10⁶ events, each
master's redis-server CPU, and the machine's busy share and load. The single node runs ``windows.shards =
--single-shards`` (1), the cluster ``--shards`` (12, as in docs/scaling.md). A worker is two busy processes
(loop and applier) and the broker and Redis need cores too, so the rate levels off well before N reaches
the machine's cores (issue 47's 16-core run: 8 → 12 workers added 3 %); on 2 cores no scale-out is visible
past N = 1-2 (docs/scaling.md has the table).

    python -m bench.bench_scaleout                                   # 1,2,4 workers, both Redis, 10⁶ events
    python -m bench.bench_scaleout --workers 1,4,8,12 --partitions 24 --events 4000000   # a 16-core machine
    python -m bench.bench_scaleout --redis single --broker tansu --events 100000 --workers 1,2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis

from stream_dp.config import RedisConfig
from stream_dp.connections import redis_client
from stream_dp.dev.devstack import BROKERS, DevStack, free_port
from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import LAYOUTS, Keys

from bench.bench_ingest import (REPO, RedisTarget, _children, _cpu_seconds, _local_cluster, _scrape, next_scrape_in,
                                produce, synthetic_events)
from bench.results import emit
from tests.support.bounding_oracle import bounded_counts

TOPIC = "scaleout-events"
WINDOW_SECONDS = 3600
WINDOWS = 4
MAX_KEYS_PER_USER = 5  # contribution.max_keys_per_user (Δ) of the workers and the oracle
SETTLE_TIMEOUT_SECONDS = 120.0  # N workers' start, group join and assignment
RUN_TIMEOUT_SECONDS = 1800.0  # from settled to the last event
STOP_TIMEOUT_SECONDS = 60.0
SETTLE_POLL_SECONDS = 0.05
MIN_MEASURED_SHARE = 0.5  # by default at least this share of the events must be left once the group has settled
SAMPLE_INTERVAL_SECONDS = 1.0  # longest gap between progress scrapes (each costs every worker CPU)
#: A worker's events done: counted, bounded, late or rejected (not duplicates: a replayed event was done by the
#: worker that had it first)
DONE = tuple(f"stream_dp_ingest_events_{n}_total" for n in ("applied", "bounded", "late", "rejected"))


def recent_day_start(now: float | None = None) -> int:
    """UTC midnight 24-48 hours ago: the stream lies in the past (Apache Kafka 4 refuses records stamped more
    than an hour ahead) and well within the default 7-day retention.

    >>> recent_day_start(2 * 86400 + 5)
    86400
    """
    now = time.time() if now is None else now
    return int(now) // 86400 * 86400 - 86400


# --------------------------------------------------------------------------------------------------
# the settled group (pure)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupView:
    """The consumer group as the broker describes it: its state and each member's assigned partitions."""

    stable: bool
    members: tuple[frozenset[int], ...]


def settled(group: GroupView | None, assigned_gauges: Sequence[float], partitions: int) -> bool:
    """Whether N workers (one gauge each, ``stream_dp_ingest_partitions_assigned``) form a settled group:
    the broker says stable with N members, their assignments are disjoint and cover ``partitions``, every
    member has one when there are enough (N ≤ partitions), and the workers' own gauges report the same sizes
    (a gauge still showing an earlier generation's assignment does not pass). ``group`` None: a broker that
    does not describe groups (Tansu), judged by the gauges alone -- they sum to ``partitions``, each > 0.

    >>> g = GroupView(True, (frozenset({0, 2}), frozenset({1, 3})))
    >>> settled(g, [2, 2], 4), settled(g, [4, 2], 4), settled(g, [2, 2, 0], 4)
    (True, False, False)
    >>> settled(GroupView(False, g.members), [2, 2], 4), settled(g, [2, 2], 5)
    (False, False)
    >>> settled(GroupView(True, (frozenset({0, 1, 2, 3}), frozenset())), [4, 0], 4)  # an idle member
    False
    >>> settled(None, [2, 2], 4), settled(None, [4, 2], 4), settled(None, [4, 0], 4)
    (True, False, False)
    """
    if group is None:
        return sum(assigned_gauges) == partitions and all(g > 0 for g in assigned_gauges[:partitions])
    if not group.stable or len(group.members) != len(assigned_gauges):
        return False
    union: set[int] = set()
    for member in group.members:
        if union & member:
            return False
        union |= member
    if union != set(range(partitions)):
        return False
    if len(group.members) <= partitions and not all(group.members):
        return False
    return sorted(len(m) for m in group.members) == sorted(int(g) for g in assigned_gauges)


class GroupWatch:
    """Describes one consumer group through confluent-kafka's AdminClient. Tansu answers DescribeGroups with
    no state and no members, so on Tansu :meth:`view` is None (the workers' gauges alone decide)."""

    def __init__(self, bootstrap: str, group: str, *, broker: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.group, self.describes = group, broker != "tansu"
        self.admin = AdminClient({"bootstrap.servers": bootstrap}) if self.describes else None

    def view(self) -> GroupView | None | Literal[False]:
        """The broker's view; None when it does not describe groups; False when it could not answer now."""
        from confluent_kafka import ConsumerGroupState, KafkaException

        if self.admin is None:
            return None
        try:
            desc = self.admin.describe_consumer_groups([self.group], request_timeout=5)[self.group].result(timeout=10)
        except KafkaException:
            return False
        members = tuple(frozenset(tp.partition for tp in (m.assignment.topic_partitions if m.assignment else [])
                                  if tp.topic == TOPIC) for m in desc.members)
        return GroupView(desc.state == ConsumerGroupState.STABLE, members)


# --------------------------------------------------------------------------------------------------
# one run: N workers
# --------------------------------------------------------------------------------------------------

@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def metrics(self) -> dict[str, float]:
        try:
            return _scrape(self.port)
        except OSError:
            return {}

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"ingest worker on metrics port {self.port} exited with {self.proc.returncode}: "
                               + " | ".join(tail))


def _done(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith(DONE))


def write_config(path: Path, *, bootstrap: str, redis_url: str, cluster: bool, shards: int, partitions: int,
                 group: str, t0: int, max_poll_records: int, layout: str = "user") -> Path:
    path.write_text(f"""
[kafka]
bootstrap_servers = "{bootstrap}"
events_topic = "{TOPIC}"
dead_letter_topic = "{TOPIC}-dlq"
ingest_group_id = "{group}"
events_partitions = {partitions}
max_poll_records = {max_poll_records}
[redis]
url = "{redis_url}"
cluster = {"true" if cluster else "false"}
[windows]
size_seconds = {WINDOW_SECONDS}
start = "{t0}"
shards = {shards}
layout = "{layout}"
[contribution]
max_keys_per_user = {MAX_KEYS_PER_USER}
[metrics]
host = "127.0.0.1"
""")
    return path


@contextlib.contextmanager
def workers(n: int, config: Path, workdir: Path) -> Iterator[list[Worker]]:
    """N ingest worker processes (the production entry point), each with its own metrics port; stopped with
    SIGTERM on exit (a graceful stop: finish the batch, commit), SIGKILL if one hangs."""
    started: list[Worker] = []
    try:
        for i in range(n):
            port = free_port()
            log_path = workdir / f"ingest-{i}.log"
            with open(log_path, "wb") as log:
                proc = subprocess.Popen([sys.executable, "-m", "workers.ingest", "--config", str(config)],
                                        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "STREAM_DP_METRICS__PORT": str(port)})
            started.append(Worker(proc, port, log_path))
        yield started
    finally:
        for w in started:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        for w in started:
            try:
                w.proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()


def wait_settled(pool: list[Worker], watch: GroupWatch, partitions: int, deadline: float) -> tuple[float, float]:
    """Poll until the group is :func:`settled`; returns (the time of that scrape, events done by then)."""
    while time.monotonic() < deadline:
        t = time.perf_counter()
        scraped = [w.metrics() for w in pool]
        gauges = [m.get("stream_dp_ingest_partitions_assigned", 0.0) for m in scraped]
        if all(scraped) and (view := watch.view()) is not False and settled(view, gauges, partitions):
            return t, sum(_done(m) for m in scraped)
        for w in pool:
            w.check_alive()
        time.sleep(SETTLE_POLL_SECONDS)
    raise RuntimeError(f"{len(pool)} workers did not settle into one group over {partitions} partitions within "
                       f"{SETTLE_TIMEOUT_SECONDS:g}s (logs: {pool[0].log_path.parent})")


def wait_done(pool: list[Worker], events: int, deadline: float) -> tuple[float, dict[str, float]]:
    """Scrape the workers (gaps from :func:`bench.bench_ingest.next_scrape_in`) until every event is done;
    returns the time of the first scrape that saw it and the summed metrics."""
    samples: list[tuple[float, float]] = []
    gap: float | None = None
    while time.monotonic() < deadline:
        t_before = time.perf_counter()
        scraped = [w.metrics() for w in pool]
        t = (t_before + time.perf_counter()) / 2
        total: dict[str, float] = {}
        for m in scraped:
            for k, v in m.items():
                total[k] = total.get(k, 0.0) + v
        done = _done(total)
        if done >= events:
            return t, total
        samples.append((t, done))
        for w in pool:
            w.check_alive()
        gap = next_scrape_in(samples, events, SAMPLE_INTERVAL_SECONDS, gap)
        time.sleep(gap)
    raise RuntimeError(f"not every event was done within {RUN_TIMEOUT_SECONDS:g}s of the group settling")


def check_counts(client: redis.Redis, shards: int, oracle: dict[int, dict[str, int]], layout: str = "user") -> None:
    """Every window's counts (summed over its shards; its key shards in the key layout) equal the oracle's;
    raises naming the first that differs."""
    store = WindowStore(client, keys=Keys(shards=shards, layout=layout), window_size=WINDOW_SECONDS)
    extra = set(store.windows()) - set(oracle)
    if extra:
        raise AssertionError(f"counts in windows the stream has no events in: {sorted(extra)}")
    for start, want in oracle.items():
        got = store.counts(start)
        if got != want:
            wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            raise AssertionError(f"window {start}: {len(wrong)} of {len(want)} keys counted wrong (e.g. "
                                 f"{wrong[0]!r}: {got.get(wrong[0], 0)} in Redis, {want.get(wrong[0], 0)} expected)")


def pool_cpu_seconds(pool: list[Worker]) -> float:
    """CPU seconds (user + system) the workers' processes -- each a loop and its applier -- have used so far."""
    total = 0.0
    for w in pool:
        for pid in [w.proc.pid, *_children(w.proc.pid)]:
            with contextlib.suppress(OSError):
                total += _cpu_seconds(pid)
    return total


def machine_cpu() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine so far (/proc/stat): the share busy over an interval says
    how much other jobs on a shared machine took."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def run_n(n: int, *, target: RedisTarget, bootstrap: str, broker: str, shards: int, partitions: int, events: int,
          oracle: dict[int, dict[str, int]], t0: int, max_poll_records: int, workdir: Path, label: str,
          min_share: float = MIN_MEASURED_SHARE, layout: str = "user") -> dict[str, Any]:
    """One measurement: N workers from an empty Redis and a new group to every event done and checked.
    Besides the rate: the workers' CPU seconds per 10⁶ events (settled to done), the machine's busy share
    over that interval and the 1-minute load average before the start (a shared machine's other jobs)."""
    target.flush()
    group = f"scaleout-{label}-{os.getpid()}"
    config = write_config(workdir / f"{label}.toml", bootstrap=bootstrap, redis_url=target.url,
                          cluster=target.cluster, shards=shards, partitions=partitions, group=group, t0=t0,
                          max_poll_records=max_poll_records, layout=layout)
    watch = GroupWatch(bootstrap, group, broker=broker)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with workers(n, config, workdir) as pool:
        t_settled, done_settled = wait_settled(pool, watch, partitions,
                                               time.monotonic() + SETTLE_TIMEOUT_SECONDS)
        cpu0, machine0, worker_cpu0 = target.cpu(), machine_cpu(), pool_cpu_seconds(pool)
        share = (events - done_settled) / events
        if share <= 0 or share < min_share:
            raise RuntimeError(f"only {share:.0%} of the events were left when {n} workers had settled "
                               f"(--min-measured-share {min_share:g}): use more --events")
        t_end, total = wait_done(pool, events, time.monotonic() + RUN_TIMEOUT_SECONDS)
        worker_cpu, machine1 = pool_cpu_seconds(pool) - worker_cpu0, machine_cpu()
    exit_codes = [w.proc.returncode for w in pool]
    cpu = [after - before for after, before in zip(target.cpu(), cpu0)]
    done, late = _done(total), total.get("stream_dp_ingest_events_late_total", 0.0)
    rejected = sum(v for k, v in total.items() if k.startswith("stream_dp_ingest_events_rejected_total"))
    if done != events or late or rejected or any(exit_codes):
        raise RuntimeError(f"{n} workers: {done:.0f} events done of {events}, {late:.0f} late, {rejected:.0f} "
                           f"rejected, exit codes {exit_codes} (logs: {workdir})")
    client = redis_client(RedisConfig(url=target.url, cluster=target.cluster))
    try:
        check_counts(client, shards, oracle, layout)
    finally:
        client.close()
    measured = events - done_settled
    return {"workers": n, "events_per_s": measured / (t_end - t_settled),
            "settle_s": t_settled - start, "measured_share": share, "seconds": t_end - t_settled,
            "worker_cpu_s_per_1e6": worker_cpu / measured * 1e6,
            "redis_cpu_s_per_master": cpu, "redis_cpu_s_per_1e6": sum(cpu) / measured * 1e6,
            "machine_busy": (machine1[0] - machine0[0]) / max(machine1[1] - machine0[1], 1), "load_avg_1m": load,
            "counts_checked": True}


def per_worker_count(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs grouped by N, in increasing N: the median events/s (a shared machine is noisy: ``--rounds``
    alternates the order of N and takes the median) and every run as it was.

    >>> [(r["workers"], r["events_per_s"]) for r in per_worker_count(
    ...     [{"workers": 2, "events_per_s": 5.0}, {"workers": 1, "events_per_s": 3.0}, {"workers": 2, "events_per_s": 7.0}])]
    [(1, 3.0), (2, 6.0)]
    """
    ns = sorted({r["workers"] for r in runs})
    out = []
    for n in ns:
        of_n = [r for r in runs if r["workers"] == n]
        out.append({"workers": n, "events_per_s": statistics.median(r["events_per_s"] for r in of_n), "runs": of_n})
        if all("worker_cpu_s_per_1e6" in r for r in of_n):
            out[-1]["worker_cpu_s_per_1e6"] = statistics.median(r["worker_cpu_s_per_1e6"] for r in of_n)
    return out


# --------------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------------

def with_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run's ratio to the N = 1 run (the baseline; the smallest N if 1 was not run) and the per-worker
    efficiency, ratio × baseline N / N.

    >>> [(r["ratio"], r["efficiency"]) for r in with_ratios([{"workers": 1, "events_per_s": 100.0},
    ...                                                      {"workers": 4, "events_per_s": 300.0}])]
    [(1.0, 1.0), (3.0, 0.75)]
    """
    base = min(runs, key=lambda r: r["workers"])
    return [{**r, "ratio": r["events_per_s"] / base["events_per_s"],
             "efficiency": r["events_per_s"] / base["events_per_s"] * base["workers"] / r["workers"]} for r in runs]


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    """The Markdown table: one row per N, per Redis its events/s, ratio to N = 1, per-worker efficiency and
    the workers' CPU seconds per 10⁶ events (flat in N: no per-worker overhead; the rate then grows with the
    cores there are)."""
    ns = sorted({r["workers"] for runs in results.values() for r in runs})
    head = "| N workers |" + "".join(f" {name} events/s | × N=1 | per worker | worker CPU-s / 10⁶ |" for name in results)
    rows = [head, "|---|" + "---|---|---|---|" * len(results)]
    for n in ns:
        cells = []
        for runs in results.values():
            r = next((r for r in runs if r["workers"] == n), None)
            cpu = "–" if r is None or "worker_cpu_s_per_1e6" not in r else f"{r['worker_cpu_s_per_1e6']:.1f}"
            cells.append(" – | – | – | – |" if r is None else
                         f" {r['events_per_s']:,.0f} | {r['ratio']:.2f} | {r['efficiency']:.2f} | {cpu} |")
        rows.append(f"| {n} |" + "".join(cells))
    return "\n".join(rows)


def _layouts(text: str) -> list[str]:
    layouts = [x.strip() for x in text.split(",") if x.strip()]
    if not layouts or set(layouts) - set(LAYOUTS) or len(set(layouts)) != len(layouts):
        raise argparse.ArgumentTypeError(f"--layouts wants some of {', '.join(LAYOUTS)} once each, got {text!r}")
    return layouts


def _worker_counts(text: str) -> list[int]:
    counts = sorted({int(x) for x in text.split(",") if x.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"--workers wants positive worker counts like 1,2,4, got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_scaleout", description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=_worker_counts, default=[1, 2, 4], help="worker counts N, e.g. 1,2,4")
    p.add_argument("--redis", choices=("single", "cluster", "both"), default="both")
    p.add_argument("--broker", choices=BROKERS, default="kafka",
                   help="kafka: Apache Kafka (what deployments run); tansu: the embedded dev broker")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys (the Zipf tail is cut here)")
    p.add_argument("--zipf-a", type=float, default=1.2)
    p.add_argument("--partitions", type=int, default=16, help="of the events topic (≥ the largest N to use them all)")
    p.add_argument("--shards", type=int, default=12, help="windows.shards on the cluster")
    p.add_argument("--single-shards", type=int, default=1, help="windows.shards on the single redis-server")
    p.add_argument("--masters", type=int, default=3, help="masters of the local Redis Cluster")
    p.add_argument("--max-poll-records", type=int, default=5000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-measured-share", type=float, default=MIN_MEASURED_SHARE,
                   help="refuse a run in which less than this share of the events was left once the group had "
                        "settled (the first workers start consuming while the others still join: Apache Kafka "
                        "holds a new group's first assignment back 3 s, Tansu does not)")
    p.add_argument("--layouts", type=_layouts, default=["user"],
                   help="windows.layout values to measure, e.g. user,key (docs/design/key-sharded-counts.md): "
                        "each N in each layout, on the same events; key / user reported per N")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every N this many times (order alternating) and report the median")
    args = p.parse_args(argv)
    if args.workers[-1] > args.partitions:
        p.error(f"--workers {args.workers[-1]} > --partitions {args.partitions}: the extra workers would idle")
    redises = ("single", "cluster") if args.redis == "both" else (args.redis,)

    t0 = recent_day_start()
    stream = synthetic_events(events=args.events, users=args.users, keys=args.keys, zipf_a=args.zipf_a,
                              windows=WINDOWS, seed=args.seed, t0=t0)
    oracle = bounded_counts(((float(ts), user, key) for user, key, ts in stream), window_size=WINDOW_SECONDS,
                            max_keys_per_user=MAX_KEYS_PER_USER)
    del stream
    results: dict[str, list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as resources:
        tmp = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="bench-scaleout-")))
        stack = resources.enter_context(DevStack(broker=args.broker, redis="single" in redises))
        t_prod = produce(stack.bootstrap_servers, TOPIC, events=args.events, users=args.users, keys=args.keys,
                         zipf_a=args.zipf_a, windows=WINDOWS, partitions=args.partitions, seed=args.seed, t0=t0)
        print(f"produced {args.events:,} events into {args.partitions} partitions in {t_prod:.1f}s "
              f"({args.broker})", file=sys.stderr)
        targets: dict[str, Callable[[], RedisTarget]] = {
            "single": lambda: RedisTarget(stack.redis_url, [redis.Redis.from_url(stack.redis_url)], cluster=False),
            "cluster": lambda: _cluster_target(resources, args.masters, tmp / "cluster"),
        }
        for name in redises:
            target = targets[name]()
            shards = args.shards if target.cluster else args.single_shards
            runs: dict[str, list[dict[str, Any]]] = {layout: [] for layout in args.layouts}
            for round_ in range(args.rounds):  # N up, then down, ...: a drift in the machine's load evens out
                for n, layout in [(n, layout) for n in (args.workers if round_ % 2 == 0 else args.workers[::-1])
                                  for layout in args.layouts]:  # the layouts of one N back to back
                    r = run_n(n, target=target, bootstrap=stack.bootstrap_servers, broker=args.broker, shards=shards,
                              partitions=args.partitions, events=args.events, oracle=oracle, t0=t0,
                              max_poll_records=args.max_poll_records, workdir=tmp,
                              label=f"{name}-{layout}-{n}-{round_}", min_share=args.min_measured_share, layout=layout)
                    runs[layout].append(r)
                    print(f"{name} ({layout} layout): {n} workers {r['events_per_s']:,.0f} events/s, {r['worker_cpu_s_per_1e6']:.1f} "
                          f"worker CPU-s per 10⁶ events (settled after {r['settle_s']:.1f}s, "
                          f"{r['measured_share']:.0%} measured, machine {r['machine_busy']:.0%} busy, load "
                          f"{r['load_avg_1m']:.1f}), counts == oracle", file=sys.stderr)
            target.close()
            for layout in args.layouts:
                results[name if layout == "user" else f"{name}/{layout}"] = with_ratios(per_worker_count(runs[layout]))
    names = {"single": "single Redis", "cluster": f"cluster ({args.masters} masters)"}
    names.update({f"{k}/key": f"{v}, key layout" for k, v in names.items()})
    layout_ratio = {name: [{"workers": u["workers"], "key_over_user": k["events_per_s"] / u["events_per_s"]}
                           for u, k in zip(results[name], results[f"{name}/key"])]
                    for name in redises if name in results and f"{name}/key" in results}
    if layout_ratio:
        print("key layout / user layout events/s: " + "; ".join(
            f"{name} N={r['workers']}: {r['key_over_user']:.2f}" for name, rs in layout_ratio.items() for r in rs),
            file=sys.stderr)
    print(f"{args.events:,} events, {args.partitions} partitions, broker {args.broker}, shards: single "
          f"{args.single_shards} / cluster {args.shards}; {os.cpu_count()} CPU cores\n")
    print(table({names[k]: v for k, v in results.items()}))
    emit({"bench": "scaleout", "events": args.events, "users": args.users, "keys": args.keys,
          "partitions": args.partitions, "broker": args.broker, "shards": args.shards,
          "single_shards": args.single_shards, "masters": args.masters, "cpu_count": os.cpu_count(),
          "workers": args.workers, "rounds": args.rounds, "layouts": args.layouts, "results": results,
          "key_over_user": layout_ratio})
    return 0


def _cluster_target(resources: contextlib.ExitStack, masters: int, workdir: Path) -> RedisTarget:
    cluster = resources.enter_context(_local_cluster(masters, workdir))
    return RedisTarget(cluster.url, [redis.Redis(host="127.0.0.1", port=n.port) for n in cluster.masters()],
                       cluster=True)


if __name__ == "__main__":
    sys.exit(main())

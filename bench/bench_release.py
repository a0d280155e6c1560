"""Window close → releases published: latency of the release worker on a large window, and where it goes.

A window of ``--keys`` distinct keys (Zipf counts, default 10⁶) is closed (the global watermark passes its
end) and the release worker releases it with top-k (k̄ = ``--k-bar``, default 1000), alerts (a watchlist of
``--watch`` config keys plus the released top-k keys) and PPS weighted sampling, all charged to the ledger
and produced to a real broker (the embedded dev stack: Tansu + redis-server). Repeated for ``--windows``
windows, each made on the Redis side from one template sorted set per shard, built once
(:mod:`bench.release_windows`: a ``COPY`` on one redis-server, a ``RESTORE`` of the template's ``DUMP`` on a
cluster).

``--cluster-masters M`` runs Redis as a local Redis Cluster of M masters instead (redis-server processes in
cluster mode on free ports, started for each layout and stopped after it: :mod:`tests.support.devcluster`);
the broker is still the dev stack's. The worker, its ledger and ingest's watermark step then use the cluster
client as production builds it (``redis.cluster = true``, :func:`stream_dp.connections.redis_client`), every
batch one pipeline per master with the masters at the same time. The JSON line names ``redis`` (``single`` /
``cluster``) and ``masters``, and gives the peak RSS of each redis-server (``redis_peak_rss_bytes``), the
seconds to build the templates (``template_s``) and to open a window (``open_window_s_median`` / ``_max``),
and the bytes of ``DUMP`` payloads the bench keeps (``template_payload_bytes``, before the windows).

``--load N`` runs N busy-looping processes beside it (a CPU burner, for the "under load" figures).

Reported: p50 / p99 of close → last record acknowledged by the broker, each window's line giving the
per-type times too. The worker is started -- schedule, Lua scripts, recovery -- before the first window
closes and then runs its own loop (:meth:`ReleaseWorker.run`) in a thread, waiting between windows as in
production; a window closes through ingest's own watermark step (:meth:`WindowStore.advance_watermark`:
the watermark scripts, the window marked closed, the close notice the waiting worker wakes on). The clock
starts when that step sends the script that installs the new global watermark (``finalize_watermark.lua``,
which also adds the close notice): that is when the watermark passes the window's end. The step's earlier
round trips (computing the target, marking the window closed) come before it; latencies from the start of
the whole step are reported too ("from ingest's step"; the eighth pass's headline). ``--direct`` measures
the way the runs before 12-02 did: the global watermark set with one ``HSET`` (the clock starts right before
it), then one pass driven directly (no wait, no wake-up). Also reported: the
per-type publish latency, and the share of
the time spent in Redis reads, mechanisms, ledger steps (Redis Lua) and Kafka produce (from the worker's
``stream_dp_release_phase_seconds_total``). Baselines measured in the same run: one full chunked read of
the window (the floor for sampling) and one acks=all produce of a record-sized message (send, flush, wait:
what the release publisher does), back to back and after an idle gap, and a Redis PING the same two ways (a
release's first steps come after the worker, the broker and redis-server idled until the close). The last
stdout line is the headline figures as one JSON object (:mod:`bench.results`).

The peak resident set size of the bench process (the worker runs in it) is reported for the windows' releases
alone (``peak_rss_bytes_windows``: the peak is started afresh after the worker's start-up, so the template's
load is not in it, and read when the last window is released, before the baseline's full reads, which come
after the windows so that what a read of every key leaves in the allocator is not counted as the worker's
own size) beside its size before the first window (``rss_bytes_before_windows``); on a kernel that refuses
the reset the peak is null. The growth, peak minus before, is what the releases of the window added.

``--trace`` lists the Redis round trips (one per command sent alone, one per pipeline) and produces of the
last window's release, in order, with their times and the time spent in the worker before each (its own
work between steps); every run reports the median round trips, process CPU time and voluntary context
switches per window (the last two measured around the whole pass, so they are less sensitive to other
processes on the machine than the latencies).

``--shards S`` stores each window in S shards (``windows.shards``), each key's count split over them at
random (multinomially: a key's users fall into every shard), so the worker merges the shards exactly.
``--layouts user,key`` measures each window layout (``windows.layout``) in turn in the same run (``user:1,key:12``:
each with its own ``windows.shards``), each on a fresh dev stack: in ``"key"`` the S shards are key shards (``crc32(key) mod S``, each key's whole count in
one), read per key shard after the drain (docs/design/key-sharded-counts.md). With two layouts the JSON line
holds both summaries and the ratios last / first of the p99 latencies and of the peak RSS growth.

    python -m bench.bench_release                       # 10⁶ keys, 5 windows (~1-2 min on 2 cores)
    python -m bench.bench_release --keys 100000 --windows 10
    python -m bench.bench_release --shards 12
    python -m bench.bench_release --shards 12 --layouts user,key   # issue 47: the key layout, ratio to user
    python -m bench.bench_release --layouts user:1,user:12,key:12   # ... and to one unsharded window
    python -m bench.bench_release --cluster-masters 3 --layouts user:1,key:12   # the same on a 3-master cluster
    # issue 47's target: a 10⁷-key window, 12 key shards, 3-master cluster (on a quiet machine; see
    # bench/README.md for its time and memory)
    python -m bench.bench_release --cluster-masters 3 --keys 10000000 --windows 3 --layouts key:12
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import redis
from prometheus_client import CollectorRegistry

from stream_dp.accounting.ledger import BudgetCap, Ledger
from stream_dp.config import config_from_mapping
from stream_dp import topics
from stream_dp.connections import redis_client
from stream_dp.node_batches import node_client
from stream_dp.release.producers import release_producer
from tests.support.devcluster import local_cluster, wait_until
from stream_dp.dev.devstack import DevStack
from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import Keys
from stream_dp.processes import freeze_start_up_heap
from stream_dp.release.metrics import PHASES, ReleaseMetrics
from stream_dp.release.ledger_guard import LedgerGuard
from stream_dp.release.outbox import Outbox, Publisher
from stream_dp.release.windows import Window
from stream_dp.release.worker import ReleaseWorker
from stream_dp.state_epochs import EpochMarker
from tests.support.windows import set_watermark

from bench.bench_ingest import proc_status_bytes
from bench.release_windows import WindowMaker, load_template
from bench.results import emit, start_cpu_load, stop_cpu_load

SIZE = 3600
#: ``cluster-node-timeout`` of the bench's cluster (``--cluster-masters``). The bench's own steps block a master
#: for seconds at 10⁷ keys (one ``RESTORE`` of a whole 10⁷-key window with ``user:1``, the ``DEL`` of a released
#: window), which the test clusters' 1 s would take for a failed master (its slots then refused:
#: ``CLUSTERDOWN``). Production's default is 15 s; no failover is measured here.
CLUSTER_NODE_TIMEOUT_MS = 60_000


def reset_peak_rss() -> bool:
    """Start this process's peak resident set size (VmHWM) afresh (Linux: ``5`` written to
    ``/proc/self/clear_refs``); False where that is not allowed (the peak is then not reported)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False
class RoundTrips:
    """Counts and times the worker's Redis round trips (one per command sent alone, one per pipeline) and
    its produces, in order, so one window's release can be listed step by step (``--trace``).

    On a cluster a command sent alone goes through :class:`redis.RedisCluster`, and a batch over several
    masters runs one pipeline per master on pool threads at the same time
    (:func:`stream_dp.node_batches.in_parallel`): such a batch is one step (``masters[...]``, its time the
    slowest master's), named by its masters' pipelines."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float]] = []
        self.gaps: list[float] = []  # per step: time since the previous step ended (the worker's own work)
        self._last_end = self._started = time.perf_counter()
        self._real: dict[str, Any] = {}
        self.thread: int | None = None  # record only this thread's steps (the worker's own loop); None: all
        self._batch: list[str] = []  # the pipelines of the worker's batch over masters under way
        self._in_batch = threading.local()  # .on: this pool thread runs a call of the worker's batch

    def install(self) -> None:
        from redis.client import Pipeline
        from redis.cluster import ClusterPipeline

        from stream_dp import node_batches

        self._real = {"cmd": redis.Redis.execute_command, "pipe": Pipeline.execute,
                      "cluster_cmd": redis.RedisCluster.execute_command, "cluster_pipe": ClusterPipeline.execute,
                      "parallel": node_batches.in_parallel}

        def timed(real: Callable[..., Any], name: Callable[[Any, tuple], str]) -> Callable[..., Any]:
            def call(client: Any, *args: Any, **kwargs: Any) -> Any:
                label, t = name(client, args), time.perf_counter()
                try:
                    return real(client, *args, **kwargs)
                finally:
                    if getattr(self._in_batch, "on", False):
                        self._batch.append(label)  # one master's pipeline of a batch: the batch is the step
                    else:
                        self.add(label, t)
            return call

        def pipeline_name(pipe: Any, _: tuple) -> str:
            return "pipeline[" + "+".join(_command_name(_stack_args(c)) for c in pipe.command_stack) + "]"

        def in_parallel(calls: Any) -> Any:
            mine = self.thread is None or threading.get_ident() == self.thread
            if len(calls) <= 1 or not mine:  # one call runs on the caller's thread: its pipeline is the step
                return self._real["parallel"](calls)
            self._batch, t = [], time.perf_counter()
            try:
                return self._real["parallel"]([functools.partial(self._batch_call, call) for call in calls])
            finally:
                self.add(f"masters[{' | '.join(self._batch)}]", t)

        redis.Redis.execute_command = timed(self._real["cmd"], lambda c, a: _command_name(a))  # type: ignore[method-assign]
        redis.RedisCluster.execute_command = timed(self._real["cluster_cmd"],  # type: ignore[method-assign]
                                                   lambda c, a: _command_name(a))
        Pipeline.execute = timed(self._real["pipe"], pipeline_name)  # type: ignore[method-assign]
        ClusterPipeline.execute = timed(self._real["cluster_pipe"], pipeline_name)  # type: ignore[method-assign]
        node_batches.in_parallel = in_parallel  # type: ignore[assignment]

    def _batch_call(self, call: Callable[[], Any]) -> Any:
        """Run one call of the worker's batch over masters (on a pool thread), its pipeline named in the batch."""
        self._in_batch.on = True
        try:
            return call()
        finally:
            self._in_batch.on = False

    def start(self) -> None:
        """Forget the steps so far; the next step's "before" time counts from now."""
        self.steps.clear()
        self.gaps.clear()
        self._last_end = self._started = time.perf_counter()

    def add(self, name: str, started: float) -> None:
        """Record a step that started at ``started`` (perf_counter) and ends now. A step that began before
        :meth:`start` (the worker's blocking wait for the close) counts from there."""
        if self.thread is not None and threading.get_ident() != self.thread:
            return
        end = time.perf_counter()
        started = max(started, self._started)
        self.steps.append((name, end - started))
        self.gaps.append(max(0.0, started - self._last_end))
        self._last_end = end

    def uninstall(self) -> None:
        from redis.client import Pipeline
        from redis.cluster import ClusterPipeline

        from stream_dp import node_batches

        if self._real:
            redis.Redis.execute_command = self._real["cmd"]  # type: ignore[method-assign]
            Pipeline.execute = self._real["pipe"]  # type: ignore[method-assign]
            redis.RedisCluster.execute_command = self._real["cluster_cmd"]  # type: ignore[method-assign]
            ClusterPipeline.execute = self._real["cluster_pipe"]  # type: ignore[method-assign]
            node_batches.in_parallel = self._real["parallel"]
            self._real = {}

    def redis_count(self) -> int:
        return sum(1 for name, _ in self.steps if not name.startswith("kafka"))


def _stack_args(command: Any) -> Any:
    """The command's arguments of one queued pipeline command (redis-py: a tuple ``(args, options)``; the
    cluster pipeline: an object with ``args``)."""
    return command.args if hasattr(command, "args") else command[0]


def _command_name(args: Any) -> str:
    name = (args[0].decode() if isinstance(args[0], bytes) else str(args[0])).upper()
    if name in ("EVALSHA", "EVAL") and len(args) > 3 and int(args[2]) > 0:  # a script: name it by its first key
        key = args[3].decode() if isinstance(args[3], bytes) else str(args[3])
        return f"{name} {key.split('}')[-1].lstrip(':') or key}"
    if len(args) > 1:
        key = args[1].decode() if isinstance(args[1], bytes) else str(args[1])
        return f"{name} {key}"
    return name


class TimedPublisher(Publisher):
    """Remembers when each record was acknowledged: records sent together (top-k and the alerts riding on
    it) count as acknowledged once the last of them is, when the outbox goes on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acked: dict[str, float] = {}
        self._acked_changed = threading.Condition()
        self.trace: RoundTrips | None = None

    def wait_acked(self, release_ids: list[str], timeout: float) -> None:
        """Block until every one of ``release_ids`` was acknowledged (the worker runs its own loop)."""
        with self._acked_changed:
            if not self._acked_changed.wait_for(lambda: all(r in self.acked for r in release_ids), timeout):
                raise TimeoutError(f"releases {release_ids} not all published within {timeout} s")

    def publish_all(self, records: Any) -> tuple[int, Exception | None]:
        t = time.perf_counter()
        acked, error = super().publish_all(records)
        now = time.perf_counter()
        with self._acked_changed:
            for record in records[:acked]:
                self.acked[record["release_id"]] = now
            self._acked_changed.notify_all()
        if self.trace is not None:
            self.trace.add("kafka produce " + "+".join(record["type"] for record in records), t)
        return acked, error


#: The idle gap before each after-idle baseline round trip: longer than the kernel keeps a CPU polling before it
#: halts, shorter than any window.
IDLE_GAP = 0.05


def produce_once(publisher: Publisher) -> None:
    """One acks=all produce of a record-sized message, as the release publisher does it: send, flush, wait."""
    future = publisher.producer.send("releases", key=b"baseline", value=b"x" * 1024)
    publisher.producer.flush(timeout=30)
    future.get(timeout=30)


def timed_round_trips(call: Callable[[], Any], *, idle: float, times: int = 20) -> list[float]:
    """Seconds each of ``times`` calls took, each after ``idle`` seconds with nothing sent (0: back to back)."""
    out = []
    for _ in range(times):
        if idle:
            time.sleep(idle)  # the condition measured is the idle gap itself
        t = time.perf_counter()
        call()
        out.append(time.perf_counter() - t)
    return out


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def run(args: argparse.Namespace) -> None:
    burners = start_cpu_load(args.load)
    try:
        layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
        results = {}
        for name in layouts:  # "layout" or "layout:shards"
            layout, _, shards = name.partition(":")
            results[name] = measure(argparse.Namespace(**{**vars(args), "shards": int(shards or args.shards)}), layout)
    finally:
        stop_cpu_load(burners)
    if len(results) == 1:
        emit(next(iter(results.values())))
        return
    base, other = results[layouts[0]], results[layouts[-1]]
    ratios = {k: other[k] / base[k] for k in base if k.startswith("p99_") and base[k]}
    peak = (other["peak_rss_bytes_windows"] - other["rss_bytes_before_windows"],
            base["peak_rss_bytes_windows"] - base["rss_bytes_before_windows"]) \
        if other["peak_rss_bytes_windows"] and base["peak_rss_bytes_windows"] else None
    print(f"\n{layouts[-1]} / {layouts[0]} (same run): p99 all {ratios.get('p99_all_s', float('nan')):.2f}x, "
          + ", ".join(f"{t} {ratios[f'p99_{t}_s']:.2f}x" for t in ("topk", "alerts", "sample")
                      if f"p99_{t}_s" in ratios)
          + ("" if peak is None else f"; peak RSS growth during the windows {peak[0] / 2**20:.0f} MiB vs "
             f"{peak[1] / 2**20:.0f} MiB"))
    emit({"bench": "release", "keys": args.keys, "shards": args.shards, "layouts": results,
          "redis": "cluster" if args.cluster_masters else "single", "masters": args.cluster_masters or 1,
          "ratio": {"of": f"{layouts[-1]}/{layouts[0]}", **ratios,
                    "peak_rss_growth": None if peak is None or not peak[1] else peak[0] / peak[1]}})


def measure(args: argparse.Namespace, layout: str = "user") -> dict[str, Any]:
    with contextlib.ExitStack() as resources:
        stack = resources.enter_context(DevStack(redis=not args.cluster_masters))
        cluster = None
        if args.cluster_masters:  # a local Redis Cluster of its own (redis-server processes on free ports)
            tmp = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="bench-release-")))
            cluster = resources.enter_context(local_cluster(
                tmp / "cluster", masters=args.cluster_masters,
                extra_args=("--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS))))
        cfg = config_from_mapping({
            "kafka": {"bootstrap_servers": stack.bootstrap_servers, "releases_topic": "releases"},
            "redis": {"url": stack.redis_url if cluster is None else cluster.url, "key_prefix": "bench",
                      "cluster": cluster is not None},
            # the schedule starts at window 1: window 0 only serves the baseline read and is never released
            "windows": {"size_seconds": SIZE, "retention_seconds": 600, "start": str(SIZE), "shards": args.shards,
                        "layout": layout},
            "budget": {"epsilon": 1e6, "delta": 1e-2, "delta_prime": 1e-7},
            "releases": {
                "topk": {"enabled": True, "k": 10, "k_bar": args.k_bar, "epsilon": 0.1, "delta": 1e-7},
                "alerts": {"enabled": True, "watchlist": [f"item-{j}" for j in range(0, 10 * args.watch, 10)],
                           "threshold": 1000.0, "k": 10, "epsilon": 1.0},
                "sample": {"enabled": True, "scheme": "pps", "tau": args.tau, "epsilon": 0.5, "delta": 1e-6},
                "histogram": {"enabled": False},  # the three types this benchmark has always measured
            },
            "metrics": {"port": 0},
            "release": {"kafka_client": args.kafka_client},
        }, environ={})
        if cluster is None:
            client = setup = redis.Redis.from_url(stack.redis_url)
            servers = [stack.redis.pid] if stack.redis is not None and stack.redis.pid else []
        else:  # the worker's client as production builds it (redis.cluster = true); the bench's own with a
            # long timeout: a RESTORE of a large template takes seconds
            client = redis_client(cfg.redis)
            setup = redis_client(cfg.redis, socket_timeout=600)
            servers = [node.pid for node in cluster.masters()]
        keys = Keys("bench", args.shards, layout)
        t = time.perf_counter()
        load_template(setup, args.keys, args.a, args.top, shards=args.shards, seed=args.seed, layout=layout)
        windows = WindowMaker(setup, keys, SIZE)
        template_s = time.perf_counter() - t
        print(f"template window: {args.keys} distinct keys, Zipf a={args.a}, top count {args.top:g}, "
              f"{args.shards} shard(s), layout {layout}, "
              + ("one redis-server" if cluster is None else f"a {args.cluster_masters}-master Redis Cluster")
              + f" (loaded in {template_s:.1f}s"
              + ("" if cluster is None else f"; {windows.payload_bytes / 2**20:.0f} MiB of DUMP payloads kept") + ")")

        topics.create(cfg.kafka, ("releases",))
        publisher = TimedPublisher(release_producer(cfg), "releases")  # release.kafka_client (--kafka-client)
        registry = CollectorRegistry()
        metrics = ReleaseMetrics(registry)
        ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys)
        outbox = Outbox(ledger, publisher, metrics)
        if not args.no_ledger_guard:  # as production (stream_dp.release.service): the epoch read before a publication
            outbox.guard = LedgerGuard(client, keys, EpochMarker(client, keys.ledger_epoch()).create("bench"))
        worker = ReleaseWorker(cfg, client, ledger, outbox, metrics,
                               worker_id="bench", rng=args.seed,
                               after_start=None if args.no_gc_freeze else freeze_start_up_heap)

        # baselines, same run: one acks=all produce of ~1 KB; a Redis PING (to the master the worker waits on);
        # the chunked full read of a window comes after the windows (see below)
        closes = node_client(client, keys.window_closes())  # the master of ingest's close notices
        base_produce = timed_round_trips(lambda: produce_once(publisher), idle=0.0)
        # what a release pays: its first produce and Redis step come after the worker (and the broker, and
        # redis-server) sat idle waiting for the close, which costs more than back to back on this machine
        idle_produce = timed_round_trips(lambda: produce_once(publisher), idle=IDLE_GAP)
        hot_ping = timed_round_trips(closes.ping, idle=0.0)
        idle_ping = timed_round_trips(closes.ping, idle=IDLE_GAP)
        produce_ms = statistics.median(base_produce) * 1e3
        idle_produce_ms = statistics.median(idle_produce) * 1e3
        hot_ping_ms, idle_ping_ms = statistics.median(hot_ping) * 1e3, statistics.median(idle_ping) * 1e3

        worker.start()  # worker start-up (schedule, Lua scripts loaded, recovery), before any window closes
        # the peak RSS of the releases alone: the template's load came before, the baseline's full read comes after
        rss_reset = reset_peak_rss()
        rss_before = proc_status_bytes(os.getpid(), "VmRSS")
        latencies: list[float] = []
        per_type: dict[str, list[float]] = {t: [] for t in worker.types}
        phase_totals = {p: 0.0 for p in PHASES}
        items = {t: [] for t in worker.types}
        trips = RoundTrips()
        publisher.trace = trips
        round_trips: list[int] = []
        cpu_ms: list[float] = []  # the bench process's CPU time per window (worker + producer threads)
        switches: list[int] = []  # its voluntary context switches per window (waits on a socket, a lock)
        last_steps: list[tuple[str, float]] = []
        slowest: tuple[float, int, list[tuple[str, float]]] | None = None  # (latency, window, steps) for --trace
        store = WindowStore(client, keys=keys, window_size=SIZE)  # ingest's watermark step (loop mode)
        installing: list[float] = []  # loop mode: when ingest's step sent the script installing the watermark
        finalize = store.watermarks._finalize  # the script that installs the watermark (stream_dp.ingest.watermarks)

        def timed_finalize(*args: Any, **kwargs: Any) -> Any:
            installing.append(time.perf_counter())
            return finalize(*args, **kwargs)

        store.watermarks._finalize = timed_finalize  # type: ignore[method-assign]
        from_step: dict[str, list[float]] = {"all": [], **{t: [] for t in worker.types}}  # clock before the whole step
        stop, loop = threading.Event(), None
        if args.poll_only:  # the loop as it was before the close notice: sleep out the poll interval (an A/B)
            passes, sleeping = worker.run_once, threading.Event()

            def polling(*, wait_seconds: float = 0.0) -> Any:
                if wait_seconds > 0:
                    sleeping.set()
                    try:
                        stop.wait(wait_seconds)
                    finally:
                        sleeping.clear()
                return passes()

            worker.run_once = polling  # type: ignore[method-assign]

        def idle() -> bool:
            """The worker is waiting for the next close: its pass's read is blocked in Redis (sleeping, with
            ``--poll-only``)."""
            if args.poll_only:
                return sleeping.is_set()
            return int(closes.info("clients")["blocked_clients"]) > 0

        def wait_idle() -> None:
            wait_until(idle, timeout=60, what="the release worker to wait for a close again", interval=0.002)

        if not args.direct:  # the worker's own loop: it waits for ingest's close notice between windows
            store.advance_watermark({0: (float(SIZE), True)}, known_partitions=[0], idle_timeout=1e9)
            loop = threading.Thread(target=worker.run, args=(stop,), name="release-worker", daemon=True)
            loop.start()
            trips.thread = loop.ident
            trips.install()
        try:
            for w in range(1, args.windows + 1):
                start = w * SIZE
                rids = [f"{start}-{start + SIZE}.{t}" for t in worker.types]
                windows.open(start)
                if loop is not None:
                    wait_idle()
                before = {p: metrics.phase_seconds.labels(p)._value.get() for p in PHASES}
                usage0 = resource.getrusage(resource.RUSAGE_SELF)
                main_cpu0 = time.thread_time()
                t0 = t_step = time.perf_counter()
                trips.start()
                if loop is None:  # driven directly: the watermark set, then one pass
                    set_watermark(client, keys, start + SIZE)  # the window closes now
                    trips.install()
                    try:
                        released = worker.run_once()
                    finally:
                        trips.uninstall()
                    assert released is not None and released.start == start, "the window was not released"
                else:  # ingest's step closes the window and notifies; the waiting worker takes it from there
                    store.advance_watermark({0: (float(start + SIZE), True)}, known_partitions=[0], idle_timeout=1e9)
                    t0 = installing[-1]  # the watermark passes the window's end with this script
                    publisher.wait_acked(rids, timeout=120)
                    wait_idle()  # the pass finished (and the next poll found nothing): CPU and round trips so far
                    main_cpu = time.thread_time() - main_cpu0  # this thread's: the ingest step, the waits
                usage1 = resource.getrusage(resource.RUSAGE_SELF)
                own = 0.0 if loop is None else main_cpu * 1e3  # the bench's own ingest step is not the worker's
                cpu_ms.append((usage1.ru_utime + usage1.ru_stime - usage0.ru_utime - usage0.ru_stime) * 1e3 - own)
                switches.append(usage1.ru_nvcsw - usage0.ru_nvcsw)
                round_trips.append(trips.redis_count())
                last_steps = list(zip(trips.steps, trips.gaps))
                done = max(publisher.acked[r] for r in rids)
                latencies.append(done - t0)
                from_step["all"].append(done - t_step)
                for t, r in zip(worker.types, rids):
                    per_type[t].append(publisher.acked[r] - t0)
                    from_step[t].append(publisher.acked[r] - t_step)
                if args.trace and (slowest is None or per_type[args.trace_slowest][-1] > slowest[0]):
                    slowest = (per_type[args.trace_slowest][-1], w, last_steps)
                for p in PHASES:
                    phase_totals[p] += metrics.phase_seconds.labels(p)._value.get() - before[p]
                for t, r in zip(worker.types, rids):
                    stored = ledger.stored(worker.scope_for(start), r)
                    items[t].append(stored.count('"key"') if stored else 0)
                print(f"window {w}: close → all published {latencies[-1]:.3f}s ("
                      + ", ".join(f"{t} {per_type[t][-1]:.3f}s" for t in worker.types) + ")"
                      + ("" if loop is None else f"; ingest's step before the watermark script {(t0 - t_step) * 1e3:.1f} ms"))
                # drop the released window's counts now (untimed, synchronous: nothing is freed in the background
                # while the next window is measured); left to the retention TTL, 200 windows of 10⁶ keys held
                # ~24 GB in Redis and the kernel killed it
                if not args.keep_windows:
                    windows.drop_counts(start)
        finally:
            stop.set()
            if loop is not None:
                loop.join(timeout=30)
                trips.uninstall()
        peak_rss = proc_status_bytes(os.getpid(), "VmHWM") if rss_reset else None

        # baseline, same run: one chunked full read of a window (the floor for sampling), three times; after the
        # windows, so that what a read of every key leaves in the allocator is not under their peak RSS
        windows.open(0)
        base_read = []
        for _ in range(3):
            worker.reader.drop_merge()  # a sharded window's merge is cached: time the read itself
            t = time.perf_counter()
            worker.reader.all_counts(Window(0, SIZE))
            base_read.append(time.perf_counter() - t)
        read_ms = statistics.median(base_read) * 1e3
        redis_peak_rss = [proc_status_bytes(pid, "VmHWM") for pid in servers]
        publisher.close()
        client.close()
        setup.close()

    if args.trace:
        print(f"\nRedis round trips and produces of the last window's release, in order ({round_trips[-1]} round trips;"
              " before = the worker's own time since the previous step):")
        for i, ((name, dt), gap) in enumerate(last_steps, 1):
            print(f"  {i:2d}. {name:<70s} {dt * 1e3:7.2f} ms   (before {gap * 1e3:5.2f} ms)")
        if slowest is not None:
            print(f"\nThe same for the window whose `{args.trace_slowest}` took longest (window {slowest[1]}, "
                  f"{slowest[0] * 1e3:.1f} ms):")
            for i, ((name, dt), gap) in enumerate(slowest[2], 1):
                print(f"  {i:2d}. {name:<70s} {dt * 1e3:7.2f} ms   (before {gap * 1e3:5.2f} ms)")
    total = sum(latencies)
    other = total - sum(phase_totals.values())
    warm = latencies[1:] if len(latencies) > 1 else latencies
    print()
    print(f"### Release latency, {args.keys:,} distinct keys, k̄ = {args.k_bar}, topk + alerts + sample, "
          f"{args.windows} windows, {args.shards} shard(s), layout {layout}\n")
    print("| measure | p50 | p99 | ratio to baseline |")
    print("|---|---|---|---|")
    print(f"| close → all 3 records published (all windows) | {pct(latencies, 50):.3f} s | {pct(latencies, 99):.3f} s "
          f"| {pct(latencies, 50) * 1e3 / (read_ms + 3 * produce_ms):.1f}× (read window + 3 produces) |")
    print(f"| same, warm windows (2nd onwards) | {pct(warm, 50):.3f} s | {pct(warm, 99):.3f} s | |")
    for t, v in per_type.items():
        print(f"| close → `{t}` published | {pct(v, 50):.3f} s | {pct(v, 99):.3f} s | |")
    if not args.direct:
        for t, v in from_step.items():
            print(f"| from ingest's step: {'all 3' if t == 'all' else f'`{t}`'} published | {pct(v, 50):.3f} s "
                  f"| {pct(v, 99):.3f} s | |")
    print(f"| baseline: chunked read of the whole window | {read_ms / 1e3:.3f} s | | 1× |")
    print(f"| baseline: one acks=all produce (1 KB) | {produce_ms / 1e3:.4f} s | | |")
    print(f"| baseline: the same after {IDLE_GAP * 1e3:.0f} ms idle | {idle_produce_ms / 1e3:.4f} s | | "
          f"{idle_produce_ms / produce_ms:.1f}× back to back |")
    print(f"| baseline: one Redis PING, back to back / after {IDLE_GAP * 1e3:.0f} ms idle | {hot_ping_ms:.2f} ms / "
          f"{idle_ping_ms:.2f} ms | | {idle_ping_ms / hot_ping_ms:.1f}× |")
    print()
    print("| share of release time | seconds (all windows) | share |")
    print("|---|---|---|")
    for p in PHASES:
        print(f"| {p} | {phase_totals[p]:.2f} | {phase_totals[p] / total:.0%} |")
    print(f"| other (record building, JSON, claims) | {other:.2f} | {other / total:.0%} |")
    print()
    print(f"Redis round trips per window (median): {int(statistics.median(round_trips))}")
    print(f"process CPU per window (median, ms): {statistics.median(cpu_ms):.1f}; "
          f"voluntary context switches per window (median): {int(statistics.median(switches))}")
    if peak_rss is not None:
        print(f"bench process RSS before the first window {rss_before / 2**20:.0f} MiB, peak during the windows' "
              f"releases {peak_rss / 2**20:.0f} MiB")
    print(f"windows opened in (median / max) {statistics.median(windows.seconds):.2f} s / {max(windows.seconds):.2f} s "
          f"({'COPY' if cluster is None else 'RESTORE'}); template built in {template_s:.1f} s; peak RSS of the "
          "redis-server" + ("" if cluster is None else " masters") + " "
          + " / ".join(f"{b / 2**20:.0f}" for b in redis_peak_rss) + " MiB")
    print("items per release (median): " + ", ".join(f"{t} {int(statistics.median(v))}" for t, v in items.items()))
    return {
        "bench": "release", "layout": layout, "keys": args.keys, "windows": args.windows, "k_bar": args.k_bar, "load": args.load, "mode": "direct" if args.direct else ("poll-only" if args.poll_only else "loop"), "keep_windows": args.keep_windows, "gc_freeze": not args.no_gc_freeze, "ledger_guard": not args.no_ledger_guard, "kafka_client": args.kafka_client,
        "shards": args.shards,
        "p50_all_s": pct(latencies, 50), "p99_all_s": pct(latencies, 99),
        "p50_warm_s": pct(warm, 50), "p99_warm_s": pct(warm, 99),
        **{f"p99_{t}_s": pct(v, 99) for t, v in per_type.items()},
        **{f"p50_{t}_s": pct(v, 50) for t, v in per_type.items()},
        **({} if args.direct else {f"p99_{t}_from_step_s": pct(v, 99) for t, v in from_step.items()}),
        "baseline_full_read_s": read_ms / 1e3, "baseline_produce_s": produce_ms / 1e3,
        "baseline_produce_after_idle_s": idle_produce_ms / 1e3, "baseline_ping_s": hot_ping_ms / 1e3,
        "baseline_ping_after_idle_s": idle_ping_ms / 1e3,
        "ratio_p50_to_full_read": pct(latencies, 50) * 1e3 / read_ms,
        "phase_share": {p: phase_totals[p] / total for p in PHASES} | {"other": other / total},
        "redis_round_trips_median": int(statistics.median(round_trips)),
        "cpu_ms_per_window_median": statistics.median(cpu_ms),
        "voluntary_switches_per_window_median": int(statistics.median(switches)),
        "items_median": {t: int(statistics.median(v)) for t, v in items.items()},
        "rss_bytes_before_windows": rss_before,
        "peak_rss_bytes_windows": peak_rss,
        "redis": "single" if cluster is None else "cluster", "masters": args.cluster_masters or 1,
        "redis_peak_rss_bytes": redis_peak_rss, "template_s": template_s,
        "template_payload_bytes": windows.payload_bytes,
        "open_window_s_median": statistics.median(windows.seconds), "open_window_s_max": max(windows.seconds),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--k-bar", type=int, default=1000)
    p.add_argument("--watch", type=int, default=50, help="config watchlist size")
    p.add_argument("--tau", type=float, default=0.01, help="PPS sampling threshold")
    p.add_argument("--a", type=float, default=1.0, help="Zipf exponent")
    p.add_argument("--top", type=float, default=100_000.0, help="count of the most frequent key")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--load", type=int, default=0, help="busy-looping processes to run beside it (CPU burner)")
    p.add_argument("--trace", action="store_true", help="list the last window's round trips and produces in order")
    p.add_argument("--trace-slowest", default="alerts", choices=("topk", "alerts", "sample"),
                   help="with --trace, also list the steps of the window where this type took longest (default alerts)")
    p.add_argument("--shards", type=int, default=1, help="windows.shards: each window stored in this many shards")
    p.add_argument("--layouts", default="user",
                   help="windows.layout(s) to measure in turn, each optionally with its own shards, e.g. user,key or "
                        "user:1,key:12 (the JSON line then gives the last / the first)")
    p.add_argument("--cluster-masters", type=int, default=0,
                   help="run Redis as a local cluster of this many masters, the worker on the cluster client "
                        "(redis.cluster = true); 0: the dev stack's one redis-server")
    p.add_argument("--no-ledger-guard", action="store_true",
                   help="leave out the ledger epoch read before each publication (an A/B of its cost)")
    p.add_argument("--no-gc-freeze", action="store_true",
                   help="do not freeze the start-up heap after the worker starts (the release process does; for an A/B)")
    p.add_argument("--direct", action="store_true",
                   help="drive the worker directly (the watermark set, then one pass) instead of its own loop woken "
                        "by ingest's close notice (the runs before 12-02 15:30 measured this way)")
    p.add_argument("--poll-only", action="store_true",
                   help="the worker's loop without the close notice: it sleeps out release.poll_interval_seconds "
                        "(0.5 s) between passes, as before 12-02 (an A/B)")
    p.add_argument("--keep-windows", action="store_true",
                   help="leave released windows to the retention TTL instead of deleting each before the next "
                        "(as before 12-02; ~120 MB of Redis memory per 10⁶-key window; an A/B)")
    p.add_argument("--kafka-client", choices=("confluent", "kafka-python"), default="confluent",
                   help="release.kafka_client: the publisher's producer (default confluent, as the worker's; for an A/B)")
    run(p.parse_args())


if __name__ == "__main__":
    main()

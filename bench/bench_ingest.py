"""Ingest throughput vs bare kafka-python and confluent-kafka consume loops on the same topic, in the same run.

The embedded dev stack (Tansu + redis-server) gets one topic of ``--events`` JSON events (default 10⁶)
from ``--users`` users (default 10⁵), Zipf(``--zipf-a``) keys over ``--keys`` distinct keys, event times
spread over ``--windows`` one-hour windows, keyed by user over ``--partitions`` partitions. Then, each in its
own process and its own consumer group, one after the other:

1. **bare**: a kafka-python ``KafkaConsumer`` poll loop that touches every record's value (no decoding,
   no commits) — the ceiling of any consumer written with kafka-python (the goal's baseline) — and the
   same loop on confluent-kafka's ``Consumer`` (librdkafka: fetch and record decoding in C), right after;
2. **ingest**: ``python -m workers.ingest`` (the real worker — the loop process and its applier process:
   decode, validate, window, bound, apply in Redis with Lua, advance the watermark, commit), its consumer
   on ``--kafka-client`` (default ``confluent``, the config default);
3. **bare** again (the machine is shared and noisy: the baseline is the mean of the two bare runs).

Rates exclude the group join. The bare loop times itself from the end of its first poll to its last event.
The worker is sampled through its /metrics (events applied, bounded, late, duplicate or rejected): every
0.1 s until it has consumed something, then at gaps 1.5× longer each time up to ``--sample-interval`` (default 1 s: coarse on
purpose, each scrape costs the worker CPU — at 4 per second its rate was about 5 % lower; Prometheus itself
scrapes every 15 s or so), and every 0.02 s once the rate so far puts the last event within the next gap.
Its rate is measured from the first sample after the first batch to the first sample that saw every event
done (``end_uncertainty_s``: the gap before that sample, how late it can be). Timed with 1-s samples only,
a run of 3·10⁵ events (~1.5 s) was timed over its first and last batch alone. Reported:
events/s of each, the ratios ingest / bare kafka-python (goal ≥ 0.95) and ingest / bare confluent, CPU seconds of each process (the worker's loop
and applier separately, and redis-server's), peak RSS (VmHWM, read from /proc before the process exits),
and Redis memory per million events (``used_memory`` after − before: counts, bounding state, offsets).

``--shards S`` splits each window into S shards (``windows.shards``); ``--cluster-masters M`` runs Redis
as a local M-master cluster (redis-server processes in cluster mode, ``redis.cluster = true``) instead of one
redis-server, and reports each master's redis-server CPU (max / mean: the shards must spread the load).

    python -m bench.bench_ingest                    # 10⁶ events, 10⁵ users (~2 min on 2 cores)
    python -m bench.bench_ingest --events 200000    # smaller
    python -m bench.bench_ingest --cluster-masters 3 --shards 12
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import redis

from stream_dp.dev.devstack import DevStack, free_port

from bench.results import emit

REPO = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000 // 3600 * 3600


def synthetic_events(*, events: int, users: int, keys: int, zipf_a: float, windows: int, seed: int,
                     t0: int = T0) -> list[tuple[str, str, str]]:
    """The benchmark stream, ``(user, key, ts)`` in production order: ``users`` uniform users, Zipf(``zipf_a``)
    keys cut at ``keys``, event times sorted over ``windows`` hours from ``t0``; ``ts`` is the body's text
    (milliseconds), so an oracle reads the same instant the worker does."""
    rng = np.random.default_rng(seed)
    user_ids = rng.integers(0, users, size=events)
    key_ids = np.minimum(rng.zipf(zipf_a, size=events), keys)
    ts = t0 + np.sort(rng.uniform(0, windows * 3600, size=events))
    return [(f"user-{u}", f"item-{k}", f"{s:.3f}") for u, k, s in zip(user_ids.tolist(), key_ids.tolist(), ts.tolist())]


def produce(bootstrap: str, topic: str, *, events: int, users: int, keys: int, zipf_a: float, windows: int,
            partitions: int, seed: int, topic_configs: dict[str, str] | None = None, t0: int = T0) -> float:
    """Create ``topic`` and its dead-letter topic as the service does (the topic contract the ingest worker's
    start check wants; ``topic_configs`` add to it) and produce :func:`synthetic_events` into it, keyed by user;
    returns the seconds producing took."""
    from kafka import KafkaProducer

    from stream_dp import topics
    from stream_dp.config import KafkaConfig

    topics.create(KafkaConfig(bootstrap_servers=bootstrap, events_topic=topic, dead_letter_topic=f"{topic}-dlq",
                              events_partitions=partitions),
                  ("events", "dead-letter"), extra_configs={"events": topic_configs or {}})
    stream = synthetic_events(events=events, users=users, keys=keys, zipf_a=zipf_a, windows=windows, seed=seed,
                              t0=t0)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=50, batch_size=512 * 1024,
                             compression_type=None)
    t = time.perf_counter()
    for user, key, ts in stream:
        value = f'{{"user": "{user}", "key": "{key}", "ts": {ts}}}'.encode()
        # the record timestamp is the event time: the same clock for every consumer (and for ingest's watermark)
        producer.send(topic, key=user.encode(), value=value, timestamp_ms=int(ts.replace(".", "")))
    producer.flush()
    producer.close()
    return time.perf_counter() - t


# --------------------------------------------------------------------------------------------------
# bare consumer (child process)
# --------------------------------------------------------------------------------------------------

def bare_consume(bootstrap: str, topic: str, events: int, max_poll_records: int) -> dict[str, Any]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bare-{os.getpid()}",
                             enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
                             heartbeat_interval_ms=1000, max_poll_records=max_poll_records)
    seen = 0
    nbytes = 0
    first: tuple[float, int] | None = None
    while seen < events:
        batch = consumer.poll(timeout_ms=500)
        for recs in batch.values():
            for rec in recs:
                nbytes += len(rec.value)
            seen += len(recs)
        if batch and first is None:
            first = (time.perf_counter(), seen)
    end = time.perf_counter()
    consumer.close()
    assert first is not None
    return {"events": seen, "rate": (seen - first[1]) / (end - first[0]), "bytes": nbytes}


def bare_consume_confluent(bootstrap: str, topic: str, events: int, max_poll_records: int) -> dict[str, Any]:
    """The same bare loop on confluent-kafka (librdkafka: fetching and record decoding in C)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-confluent-{os.getpid()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    consumer.subscribe([topic])
    seen = 0
    nbytes = 0
    first: tuple[float, int] | None = None
    while seen < events:
        batch = consumer.consume(num_messages=max_poll_records, timeout=0.5)
        for msg in batch:
            if msg.error() is None:
                nbytes += len(msg.value())
                seen += 1
        if batch and first is None:
            first = (time.perf_counter(), seen)
    end = time.perf_counter()
    consumer.close()
    assert first is not None
    return {"events": seen, "rate": (seen - first[1]) / (end - first[0]), "bytes": nbytes}


def run_bare(bootstrap: str, topic: str, events: int, max_poll_records: int, client: str = "kafka-python"
             ) -> dict[str, Any]:
    """A bare loop in its own process: ``client`` "kafka-python" or "confluent"."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_ingest", "--bare-child", bootstrap, topic,
                             str(events), str(max_poll_records), client], cwd=REPO, stdout=subprocess.PIPE)
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bare consumer exited with {proc.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------
# the ingest worker (child process)
# --------------------------------------------------------------------------------------------------

_DONE = tuple(f"stream_dp_ingest_events_{n}_total" for n in ("applied", "bounded", "late", "duplicate", "rejected"))


def _scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(stream_dp_ingest_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class RedisTarget:
    """The Redis the worker writes to: the dev stack's one redis-server, or a local cluster's masters
    (``masters`` plain clients, one per master, for CPU and memory figures)."""

    def __init__(self, url: str, masters: list[redis.Redis], *, cluster: bool) -> None:
        self.url, self.masters, self.cluster = url, masters, cluster

    def cpu(self) -> list[float]:
        """CPU seconds (user + sys) of each master's redis-server so far."""
        return [_redis_cpu(m) for m in self.masters]

    def used_memory(self) -> int:
        return sum(int(m.info("memory")["used_memory"]) for m in self.masters)

    def flush(self) -> None:
        for m in self.masters:
            m.flushall()

    def close(self) -> None:
        for m in self.masters:
            m.close()


def _local_cluster(masters: int, workdir: Path):  # a context manager of LocalCluster
    """A local Redis Cluster (:mod:`tests.support.devcluster`): redis-server processes in cluster mode on free
    ports, returned once the cluster is healthy."""
    from tests.support.devcluster import local_cluster

    return local_cluster(workdir, masters=masters)


def proc_status_bytes(pid: int, field: str) -> int:
    """A size field of a live process's ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``…), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def _peak_rss(pid: int) -> int:
    """Peak resident set size (VmHWM) of a live process, in bytes (``ru_maxrss`` of a child started by
    fork+exec would report the parent's size at the fork when that is larger)."""
    return proc_status_bytes(pid, "VmHWM")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: The gap between progress scrapes of the ingest worker until it has consumed something, and after its first
#: progress sample; each next gap is GROWTH times longer, up to --sample-interval. A run of 3·10⁵ events lasts
#: ~1.5 s here, and one timed by 1-s samples only was timed over one batch: 5k-35k events/s for a worker doing
#: ~250k/s (bench/README.md).
FIRST_SCRAPE_GAP = 0.1
GROWTH = 1.5
#: The gap once the rate so far puts the last event within the next regular gap: the end is timed to this.
END_SCRAPE_GAP = 0.02


def next_scrape_in(samples: list[tuple[float, float]], events: int, interval: float,
                   last_gap: float | None = None) -> float:
    """Seconds until the next progress scrape: :data:`FIRST_SCRAPE_GAP` until the first progress sample
    (the group join: nothing is consumed yet), then growing by :data:`GROWTH` per sample to ``interval``
    (every scrape costs the worker CPU: 4 scrapes/s took about 5 % off its rate); :data:`END_SCRAPE_GAP`
    once the last two samples' rate says the last event is due within the next gap, and from then on
    (``last_gap``, the gap this returned before), so the end is timed closely even if the last batch is slow.

    >>> next_scrape_in([], 10**6, 1.0), next_scrape_in([(0.0, 5.0)] * 20, 10**6, 1.0)
    (0.1, 1.0)
    >>> next_scrape_in([(0.0, 0.0), (1.0, 900_000.0)], 10**6, 1.0)  # 100k left at 900k/s
    0.02
    >>> next_scrape_in([(1.0, 900_000.0), (1.02, 900_000.0)], 10**6, 1.0, last_gap=0.02)  # stays so
    0.02
    """
    gap = min(interval, FIRST_SCRAPE_GAP * GROWTH ** max(0, len(samples) - 1))
    if last_gap == END_SCRAPE_GAP < gap:
        return END_SCRAPE_GAP
    if len(samples) >= 2:
        (ta, da), (tb, db) = samples[-2], samples[-1]
        if tb > ta and db > da and (events - db) * (tb - ta) / (db - da) <= gap:
            return END_SCRAPE_GAP
    return gap


def run_ingest(bootstrap: str, redis_url: str, topic: str, events: int, max_poll_records: int,
               workdir: Path, *, group: str, sample_interval: float, shards: int = 1,
               cluster: bool = False, kafka_client: str = "confluent") -> dict[str, Any]:
    port = free_port()
    cfg = workdir / "ingest.toml"
    cfg.write_text(f"""
[kafka]
bootstrap_servers = "{bootstrap}"
events_topic = "{topic}"
dead_letter_topic = "{topic}-dlq"
ingest_group_id = "{group}"
max_poll_records = {max_poll_records}
[redis]
url = "{redis_url}"
cluster = {"true" if cluster else "false"}
[windows]
size_seconds = 3600
shards = {shards}
[ingest]
kafka_client = "{kafka_client}"
[metrics]
port = {port}
host = "127.0.0.1"
""")
    log = open(workdir / "ingest.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "workers.ingest", "--config", str(cfg)], cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT)
    # progress samples (time, events done) from /metrics, spaced by next_scrape_in: the rate is measured from
    # the first sample after the first batch to the first sample that saw every event done
    samples: list[tuple[float, float]] = []
    scrapes = 0
    gap: float | None = None  # the last gap slept
    end_sample: tuple[float, float] | None = None
    metrics: dict[str, float] = {}
    rss: dict[str, int] = {}
    cpu: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            t_before = time.perf_counter()
            try:
                metrics = _scrape(port)
            except OSError:
                metrics = {}
            t = (t_before + time.perf_counter()) / 2
            scrapes += 1
            done = sum(v for k, v in metrics.items() if k.startswith(_DONE))  # applied, dropped or rejected
            if done >= events:
                end_sample = (t, done)  # the first sample that saw every event done
                break
            if done:
                samples.append((t, done))
            if proc.poll() is not None:
                log.flush()
                tail = (workdir / "ingest.log").read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"ingest worker exited with {proc.returncode}: " + " | ".join(tail))
            gap = next_scrape_in(samples, events, sample_interval, gap)
            time.sleep(gap)
        for name, pid in [("worker", proc.pid)] + [("applier", c) for c in _children(proc.pid)]:
            try:
                rss[name] = rss.get(name, 0) + _peak_rss(pid)
                cpu[name] = cpu.get(name, 0.0) + _cpu_seconds(pid)
            except (OSError, RuntimeError):
                pass
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait()
        log.close()
    if not samples or end_sample is None:
        raise RuntimeError("no progress sample inside the run (or the run did not finish): use more --events")
    (t0, d0), (t1, d1) = samples[0], end_sample
    return {"events": int(metrics.get("stream_dp_ingest_events_consumed_total", 0)),
            "rate": (d1 - d0) / (t1 - t0), "end_uncertainty_s": t1 - samples[-1][0], "scrapes": scrapes,
            "rss": rss, "cpu": cpu,
            "exit_code": proc.returncode, "metrics": metrics}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--bare-child":
        bootstrap, topic, events, mpr = argv[1], argv[2], int(argv[3]), int(argv[4])
        client = argv[5] if len(argv) > 5 else "kafka-python"
        consume = bare_consume_confluent if client == "confluent" else bare_consume
        result = consume(bootstrap, topic, events, mpr)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result["rss_bytes"] = _peak_rss(os.getpid())
        result["cpu_seconds"] = usage.ru_utime + usage.ru_stime
        print(json.dumps(result))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.bench_ingest", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys (Zipf tail is cut here)")
    p.add_argument("--zipf-a", type=float, default=1.2)
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--max-poll-records", type=int, default=5000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, help="bare, (ingest, bare) x rounds: more runs, less noise")
    p.add_argument("--sample-interval", type=float, default=1.0,
                   help="seconds between progress scrapes of the worker's /metrics (each costs the worker "
                        "CPU: 4 scrapes/s took about 5%% off its rate)")
    p.add_argument("--shards", type=int, default=1, help="windows.shards: shards per window")
    p.add_argument("--kafka-client", default="confluent", choices=("confluent", "kafka-python"),
                   help="ingest.kafka_client of the ingest worker")
    p.add_argument("--cluster-masters", type=int, default=0,
                   help="run Redis as a local cluster of this many masters (0: the dev stack's one redis-server)")
    args = p.parse_args(argv)

    with contextlib.ExitStack() as resources:
        tmp = resources.enter_context(tempfile.TemporaryDirectory(prefix="bench-ingest-"))
        stack = resources.enter_context(DevStack(redis=not args.cluster_masters))
        if args.cluster_masters:
            cluster = resources.enter_context(_local_cluster(args.cluster_masters, Path(tmp) / "cluster"))
            target = RedisTarget(cluster.url, [redis.Redis(host="127.0.0.1", port=n.port) for n in cluster.masters()],
                                 cluster=True)
        else:
            target = RedisTarget(stack.redis_url, [redis.Redis.from_url(stack.redis_url)], cluster=False)
        topic = "bench-events"
        t_prod = produce(stack.bootstrap_servers, topic, events=args.events, users=args.users, keys=args.keys,
                         zipf_a=args.zipf_a, windows=args.windows, partitions=args.partitions, seed=args.seed)
        print(f"produced {args.events} events in {t_prod:.1f}s", file=sys.stderr)
        mem0 = target.used_memory()
        bares, bares_ck, ingests, redis_cpu, master_cpu = [], [], [], [], []

        def bare_pair() -> None:  # both bare loops, one right after the other
            bares.append(run_bare(stack.bootstrap_servers, topic, args.events, args.max_poll_records))
            bares_ck.append(run_bare(stack.bootstrap_servers, topic, args.events, args.max_poll_records, "confluent"))
            print(f"bare kafka-python: {bares[-1]['rate']:.0f} events/s, bare confluent: {bares_ck[-1]['rate']:.0f}",
                  file=sys.stderr)

        for i in range(args.rounds):
            bare_pair()
            if i > 0:  # a fresh Redis state per round (the memory figure is taken after round 1)
                target.flush()
            cpu0 = target.cpu()
            ingests.append(run_ingest(stack.bootstrap_servers, target.url, topic, args.events,
                                      args.max_poll_records, Path(tmp), group=f"ingest-bench-{i}",
                                      sample_interval=args.sample_interval, shards=args.shards,
                                      cluster=target.cluster, kafka_client=args.kafka_client))
            per_master = [after - before for after, before in zip(target.cpu(), cpu0)]
            master_cpu.append(per_master)
            redis_cpu.append(sum(per_master))
            print(f"ingest: {ingests[-1]['rate']:.0f} events/s", file=sys.stderr)
            if i == 0:
                mem1 = target.used_memory()
        bare_pair()
        target.close()
    m = ingests[0]["metrics"]
    ratios = [ing["rate"] / ((bares[i]["rate"] + bares[i + 1]["rate"]) / 2) for i, ing in enumerate(ingests)]
    ratios_ck = [ing["rate"] / ((bares_ck[i]["rate"] + bares_ck[i + 1]["rate"]) / 2) for i, ing in enumerate(ingests)]
    cpu_bare = statistics.median(b["cpu_seconds"] for b in bares)
    cpu_bare_ck = statistics.median(b["cpu_seconds"] for b in bares_ck)
    cpu_loop = statistics.median(ing["cpu"].get("worker", 0.0) for ing in ingests)
    cpu_applier = statistics.median(ing["cpu"].get("applier", 0.0) for ing in ingests)
    cpu_ingest = cpu_loop + cpu_applier
    cpu_redis = statistics.median(redis_cpu)
    applied = m.get("stream_dp_ingest_events_applied_total", 0)
    bounded = sum(v for k, v in m.items() if k.startswith("stream_dp_ingest_events_bounded_total"))
    late = m.get("stream_dp_ingest_events_late_total", 0)
    fmt = lambda xs: " / ".join(f"{x:,.0f}" for x in xs)  # noqa: E731
    per_m = lambda seconds: f"{seconds / args.events * 1e6:.1f}"  # noqa: E731
    rows = [
        ("events (users, keys, partitions)", f"{args.events:,} ({args.users:,}, Zipf a={args.zipf_a} over "
                                             f"{args.keys:,}, {args.partitions})"),
        ("Redis (masters, windows.shards)", f"{'cluster' if target.cluster else 'one node'} "
                                            f"({len(master_cpu[0])}, {args.shards})"),
        ("redis-server CPU s per master, round 1 (max / mean)",
         " / ".join(f"{x:.1f}" for x in master_cpu[0]) + f" ({max(master_cpu[0]):.1f} / "
         f"{statistics.mean(master_cpu[0]):.1f})"),
        ("bare kafka-python loop, events/s (each run)", fmt(b["rate"] for b in bares)),
        ("bare confluent-kafka loop, events/s (each run)", fmt(b["rate"] for b in bares_ck)),
        (f"ingest worker ({args.kafka_client}), events/s (each run)", fmt(i["rate"] for i in ingests)),
        ("**ratio ingest / bare kafka-python** (wall clock, vs the mean of the bare runs around it)",
         "**" + " / ".join(f"{x:.2f}" for x in ratios) + "** (goal ≥ 0.95)"),
        ("ratio ingest / bare confluent-kafka (the same way)", " / ".join(f"{x:.2f}" for x in ratios_ck)),
        ("CPU seconds per 10⁶ events: bare kafka-python / bare confluent / worker loop + applier / redis-server",
         f"{per_m(cpu_bare)} / {per_m(cpu_bare_ck)} / {per_m(cpu_loop)} + {per_m(cpu_applier)} / {per_m(cpu_redis)}"),
        ("ratio by CPU: bare / worker loop; bare / (loop + applier + redis-server)",
         f"{cpu_bare / cpu_loop:.2f}; {cpu_bare / (cpu_ingest + cpu_redis):.2f}"),
        ("peak RSS: worker loop + applier / bare loop",
         f"{ingests[0]['rss'].get('worker', 0) / 2**20:.0f} + {ingests[0]['rss'].get('applier', 0) / 2**20:.0f}"
         f" MiB / {max(b['rss_bytes'] for b in bares) / 2**20:.0f} MiB"),
        ("Redis memory per 10⁶ events; per counted (user, key) pair",
         f"{(mem1 - mem0) / args.events * 1e6 / 2**20:.1f} MiB; {(mem1 - mem0) / max(applied, 1):.0f} B"),
        ("applied / bounded / late", f"{applied:,.0f} / {bounded:,.0f} / {late:,.0f}"),
        ("worker exit code after SIGTERM", " / ".join(str(i["exit_code"]) for i in ingests)),
    ]
    print("| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    emit({
        "bench": "ingest", "events": args.events, "users": args.users, "partitions": args.partitions,
        "shards": args.shards, "cluster_masters": args.cluster_masters,
        "redis_cpu_s_per_master": master_cpu[0],
        "redis_cpu_max_over_mean": max(master_cpu[0]) / max(statistics.mean(master_cpu[0]), 1e-9),
        "redis_bytes_per_counted_pair": (mem1 - mem0) / max(applied, 1),
        "rounds": args.rounds, "bare_events_per_s": [b["rate"] for b in bares],
        "bare_confluent_events_per_s": [b["rate"] for b in bares_ck], "kafka_client": args.kafka_client,
        "ingest_events_per_s": [i["rate"] for i in ingests], "ratio_ingest_over_bare": ratios,
        "ratio_ingest_over_bare_confluent": ratios_ck,
        "cpu_s_per_1e6": {"bare": cpu_bare / args.events * 1e6, "bare_confluent": cpu_bare_ck / args.events * 1e6,
                          "worker_loop": cpu_loop / args.events * 1e6,
                          "applier": cpu_applier / args.events * 1e6, "redis": cpu_redis / args.events * 1e6},
        "peak_rss_bytes": {"worker_loop": ingests[0]["rss"].get("worker", 0),
                           "applier": ingests[0]["rss"].get("applier", 0),
                           "bare": max(b["rss_bytes"] for b in bares)},
        "redis_bytes_per_1e6_events": (mem1 - mem0) / args.events * 1e6,
        "applied": applied, "bounded": bounded, "late": late,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Ingest side by side: Quix Streams vs bare kafka-python / confluent-kafka loops vs stream-dp ingest, same topic.

One topic on the embedded dev stack (Tansu + redis-server) gets ``--events`` JSON events (default 10⁶) from
``--users`` users, Zipf keys, event times over ``--windows`` one-hour windows, keyed by user over
``--partitions`` partitions (the events of :mod:`bench.bench_ingest`; record timestamp = event time). The
topic is created with explicit ``retention.ms`` / ``retention.bytes`` configs: Quix Streams 3.28 reads them
back to create its internal topics and fails against Tansu without them. Then, one after the other, each in
its own process and consumer group, each reading the whole topic:

- **quix (at-least-once / exactly-once)**: a Quix Streams ``Application`` counting *distinct users per key per
  tumbling one-hour window* the way its documentation builds such a count: ``group_by("key")`` (repartition
  by the counted key), a stateful ``filter`` that keeps the first event of each (window, user) per key
  (RocksDB state), then ``tumbling_window(1 h).count().final()``. ``processing_guarantee`` is
  ``"at-least-once"`` or ``"exactly-once"`` (Kafka transactions). It does not bound contributions (L0).
- **bare kafka-python**: a kafka-python poll loop that only touches each record (no decoding, no commits) —
  the goal's baseline; **bare confluent**: the same loop on confluent-kafka (librdkafka, record decoding in
  C; what Quix Streams and stream-dp's default ingest consumer run on), shown next to it;
- **ingest**: the real ingest worker (``python -m workers.ingest``: decode, validate, window, bound per user,
  apply exactly once in Redis, watermark, commit), its consumer on ``--kafka-client`` (default
  ``confluent``, the config default).

Rates exclude start-up: Quix and the bare loop time themselves from their first input record to the last
(Quix: the last repartitioned record through the distinct filter), ingest is sampled through /metrics as in
bench_ingest. Reported per run: events/s, CPU seconds per 10⁶ events (the process and its threads/children;
ingest: loop + applier, and redis-server separately; the broker's CPU during each run is shown too, as Quix
also produces repartition and changelog records), peak RSS, and the ratios ingest / quix, ingest / bare kafka-python and ingest / bare confluent.

    python -m bench.bench_vs_quix                       # 10⁶ events, 1 round (~5 min)
    python -m bench.bench_vs_quix --rounds 3            # more rounds, every run reported
    python -m bench.bench_vs_quix --events 100000       # smaller

Needs the ``bench`` extra (``pip install -e '.[embedded,bench]'``: quixstreams). The last stdout line is the
result as one JSON object (:mod:`bench.results`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from stream_dp.dev.devstack import DevStack

from bench.bench_ingest import _cpu_seconds, _peak_rss, _redis_cpu, produce, run_bare, run_ingest
from bench.results import emit

REPO = Path(__file__).resolve().parent.parent
TOPIC = "vs-quix-events"
HOUR_MS = 3600 * 1000
TOPIC_CONFIGS = {"retention.ms": str(7 * 24 * HOUR_MS), "retention.bytes": str(-1)}


def quix_consume(bootstrap: str, topic: str, events: int, guarantee: str, state_dir: str, group: str) -> dict[str, Any]:
    """Child process: the Quix Streams application; returns its rate once ``events`` records went through."""
    import logging

    from quixstreams import Application

    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      processing_guarantee=guarantee, state_dir=state_dir, loglevel="WARNING")
    source = app.topic(topic, value_deserializer="json",
                       timestamp_extractor=lambda value, headers, ts, ts_type: int(value["ts"] * 1000))
    progress = {"in": 0, "through": 0, "first": 0.0, "last": 0.0, "windows": 0}

    def arrived(_value: Any) -> None:
        if progress["in"] == 0:
            progress["first"] = time.perf_counter()
        progress["in"] += 1

    def first_of_user_in_window(value: dict, state: Any) -> bool:
        """Per key (after the repartition): keep an event only for a (window, user) not seen yet."""
        progress["through"] += 1
        if progress["through"] >= events:
            progress["last"] = time.perf_counter()
            app.stop()
        marker = f"{int(value['ts'] * 1000) // HOUR_MS}:{value['user']}"
        if state.get(marker) is not None:
            return False
        state.set(marker, 1)
        return True

    def closed(_value: Any) -> None:
        progress["windows"] += 1

    sdf = app.dataframe(source)
    sdf = sdf.update(arrived)
    sdf = sdf.group_by("key")
    sdf = sdf.filter(first_of_user_in_window, stateful=True)
    sdf = sdf.tumbling_window(duration_ms=HOUR_MS).count().final()
    sdf = sdf.update(closed)
    app.run()
    if progress["through"] < events:
        raise RuntimeError(f"quix stopped after {progress['through']} of {events} records")
    return {"events": progress["through"], "rate": (events - 1) / (progress["last"] - progress["first"]),
            "windows_closed": progress["windows"]}


def run_quix(bootstrap: str, topic: str, events: int, guarantee: str, workdir: Path, group: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.bench_vs_quix", "--quix-child", bootstrap, topic, str(events),
                          guarantee, str(workdir / f"state-{group}"), group], cwd=REPO, capture_output=True,
                         text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"quix ({guarantee}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--quix-child":
        bootstrap, topic, events, guarantee, state_dir, group = argv[1:7]
        result = quix_consume(bootstrap, topic, int(events), guarantee, state_dir, group)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        result["rss_bytes"] = _peak_rss(os.getpid())
        result["cpu_seconds"] = usage.ru_utime + usage.ru_stime
        print(json.dumps(result))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.bench_vs_quix", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--zipf-a", type=float, default=1.2)
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--max-poll-records", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--guarantees", default="at-least-once,exactly-once",
                   help="Quix Streams processing guarantees to run (empty: skip Quix)")
    p.add_argument("--kafka-client", default="confluent", choices=("confluent", "kafka-python"),
                   help="ingest.kafka_client of the ingest worker")
    p.add_argument("--sample-interval", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    guarantees = [g for g in args.guarantees.split(",") if g]

    runs: dict[str, list[dict[str, Any]]] = {"bare": [], "bare confluent": [], "ingest": [],
                                             **{f"quix {g}": [] for g in guarantees}}
    with DevStack() as stack, tempfile.TemporaryDirectory(prefix="bench-vs-quix-") as tmp:
        t = produce(stack.bootstrap_servers, TOPIC, events=args.events, users=args.users, keys=args.keys,
                    zipf_a=args.zipf_a, windows=args.windows, partitions=args.partitions, seed=args.seed,
                    topic_configs=TOPIC_CONFIGS)
        print(f"produced {args.events} events in {t:.1f}s", file=sys.stderr)
        r = redis.Redis.from_url(stack.redis_url)

        def timed(name: str, fn: Any) -> None:
            broker0 = _cpu_seconds(stack.broker.pid)
            res = fn()
            res["broker_cpu_seconds"] = _cpu_seconds(stack.broker.pid) - broker0
            runs[name].append(res)
            print(f"{name}: {res['rate']:,.0f} events/s", file=sys.stderr, flush=True)

        def bare_pair() -> None:
            timed("bare", lambda: run_bare(stack.bootstrap_servers, TOPIC, args.events, args.max_poll_records))
            timed("bare confluent", lambda: run_bare(stack.bootstrap_servers, TOPIC, args.events,
                                                     args.max_poll_records, "confluent"))

        for i in range(args.rounds):
            bare_pair()
            r.flushdb()
            cpu0 = _redis_cpu(r)

            def ingest(i: int = i, cpu0: float = cpu0) -> dict[str, Any]:
                res = run_ingest(stack.bootstrap_servers, stack.redis_url, TOPIC, args.events, args.max_poll_records,
                                 Path(tmp), group=f"ingest-{i}", sample_interval=args.sample_interval,
                                 kafka_client=args.kafka_client)
                res["redis_cpu_seconds"] = _redis_cpu(r) - cpu0
                res.pop("metrics", None)
                return res

            timed("ingest", ingest)
            for g in guarantees:
                timed(f"quix {g}", lambda g=g, i=i: run_quix(stack.bootstrap_servers, TOPIC, args.events, g, Path(tmp),
                                                         group=f"quix-{g}-{i}"))
        bare_pair()
        r.close()

    per_m = 1e6 / args.events
    rate = {n: [x["rate"] for x in v] for n, v in runs.items()}
    cpu = {
        "bare": [x["cpu_seconds"] * per_m for x in runs["bare"]],
        "bare confluent": [x["cpu_seconds"] * per_m for x in runs["bare confluent"]],
        "ingest": [(x["cpu"].get("worker", 0.0) + x["cpu"].get("applier", 0.0)) * per_m for x in runs["ingest"]],
        **{f"quix {g}": [x["cpu_seconds"] * per_m for x in runs[f"quix {g}"]] for g in guarantees},
    }
    rss = {
        "bare": max(x["rss_bytes"] for x in runs["bare"]),
        "bare confluent": max(x["rss_bytes"] for x in runs["bare confluent"]),
        "ingest": max(x["rss"].get("worker", 0) + x["rss"].get("applier", 0) for x in runs["ingest"]),
        **{f"quix {g}": max(x["rss_bytes"] for x in runs[f"quix {g}"]) for g in guarantees},
    }
    ingest_over_bare = [ing / ((rate["bare"][i] + rate["bare"][i + 1]) / 2) for i, ing in enumerate(rate["ingest"])]
    ingest_over_ck = [ing / ((rate["bare confluent"][i] + rate["bare confluent"][i + 1]) / 2)
                      for i, ing in enumerate(rate["ingest"])]
    ingest_over_quix = {g: [ing / q for ing, q in zip(rate["ingest"], rate[f"quix {g}"])] for g in guarantees}

    print(f"\n### Ingest side by side: {args.events:,} events, {args.users:,} users, Zipf a={args.zipf_a} over "
          f"{args.keys:,} keys, {args.windows} one-hour windows, {args.partitions} partitions, {args.rounds} round(s)\n")
    print("| consumer | events/s (each run) | CPU s per 10⁶ events (each run) | broker CPU s per 10⁶ | peak RSS |")
    print("|---|---|---|---|---|")
    for n in runs:
        extra = ""
        if n == "ingest":
            extra = " (+ redis-server " + " / ".join(f"{x['redis_cpu_seconds'] * per_m:.1f}" for x in runs[n]) + ")"
        rates = " / ".join(f"{x:,.0f}" for x in rate[n])
        cpus = " / ".join(f"{x:.1f}" for x in cpu[n])
        broker = " / ".join(f"{x['broker_cpu_seconds'] * per_m:.1f}" for x in runs[n])
        print(f"| {n} | {rates} | {cpus}{extra} | {broker} | {rss[n] / 2**20:.0f} MiB |")
    print()
    print(f"ratio ingest ({args.kafka_client}) / bare kafka-python (each round, vs the mean of the bare runs around "
          f"it): {' / '.join(f'{x:.2f}' for x in ingest_over_bare)}  (goal ≥ 0.95)")
    print(f"ratio ingest ({args.kafka_client}) / bare confluent (the same way): "
          f"{' / '.join(f'{x:.2f}' for x in ingest_over_ck)}")
    for g in guarantees:
        print(f"ratio ingest / quix {g} (each round): {' / '.join(f'{x:.1f}' for x in ingest_over_quix[g])}  (goal ≥ 5)")
    emit({
        "bench": "vs_quix", "events": args.events, "users": args.users, "partitions": args.partitions,
        "rounds": args.rounds, "events_per_s": rate, "cpu_s_per_1e6": cpu, "peak_rss_bytes": rss,
        "kafka_client": args.kafka_client, "ratio_ingest_over_bare": ingest_over_bare,
        "ratio_ingest_over_bare_confluent": ingest_over_ck,
        "ratio_ingest_over_quix": {g: v for g, v in ingest_over_quix.items()},
        "median_ratio_ingest_over_quix": {g: statistics.median(v) for g, v in ingest_over_quix.items()},
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

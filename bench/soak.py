"""Soak: memory of every process over a long run at a fixed event rate (is it flat?).

The embedded dev stack (Tansu + redis-server), one ingest worker (``python -m workers.ingest``: loop and
applier processes) and one release worker (``python -m workers.release``), windows shortened to
``--window`` seconds (default 120) so that windows open, close, get released and expire during the run.
A producer process sends ``--rate`` events/s (default 20 000) from ``--users`` users (default 10⁵), Zipf
keys, event time = now, for ``--minutes`` minutes (default 30); then a trickle of 20 events/s keeps the
watermark moving for ``--drain`` seconds, so every window of the stream closes, is released and expires
after ``--retention`` seconds.

Every ``--interval`` seconds (default 10) it samples the resident set size (VmRSS) of each process and
Redis' ``used_memory``. Reported: the series (``--out`` JSON, and a plot ``--plot`` if matplotlib is
installed: it is in the ``eval`` and ``test`` extras), RSS growth of each process between
``--from-minute`` (default 10) and the end of the stream (mean of the last minute vs the mean of the
minute starting there; target < 5 %), and Redis memory at the end of the drain vs its baseline before the
stream. A run is marked not valid (``valid``, ``problems``) when the machine could not carry the load: the
producer fell below 98 % of ``--rate``, ingest dead-lettered events, or fewer windows were released than the
stream closed -- its memory figures then measure a backlog, not the workers. The last stdout line is the
result as one JSON object (:mod:`bench.results`).

    python -m bench.soak                                  # 30 minutes at 20k events/s (+ drain)
    python -m bench.soak --smoke                          # ~1 minute: the whole path at small scale
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from stream_dp.dev.devstack import DevStack, free_port
from stream_dp.store.keys import Keys

from bench.results import emit

REPO = Path(__file__).resolve().parent.parent
TOPIC = "soak-events"
PARTITIONS = 4


def produce(bootstrap: str, rate: float, users: int, seconds: float, seed: int, report: str = "") -> None:
    """Send ``rate`` events/s for ``seconds`` (paced every 50 ms), then exit (child process). Each event's
    time is the clock when it is sent, so a producer that falls behind sends late events, not stale ones
    (stale times would be dead-lettered as ``event_time_out_of_range`` and hold the watermark back). What it
    achieved goes to ``report`` (JSON) when given."""
    import numpy as np
    from kafka import KafkaProducer

    rng = np.random.default_rng(seed)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=256 * 1024)
    tick = 0.05
    start = time.time()
    sent = 0
    while True:
        now = time.time()
        if now - start >= seconds:
            break
        due = int((now - start) * rate) + 1
        n = due - sent
        if n > 0:
            uids = rng.integers(0, users, size=n).tolist()
            kids = np.minimum(rng.zipf(1.2, size=n), 100_000).tolist()
            for u, k in zip(uids, kids):
                user = f"user-{u}"
                producer.send(TOPIC, key=user.encode(),
                              value=f'{{"user": "{user}", "key": "item-{k}", "ts": {time.time():.3f}}}'.encode())
            sent = due
        time.sleep(max(0.0, tick - (time.time() - now)))
    producer.flush()
    producer.close()
    elapsed = time.time() - start
    print(f"producer: {sent} events in {elapsed:.0f} s ({sent / max(1e-9, elapsed):.0f}/s)", file=sys.stderr, flush=True)
    if report:
        Path(report).write_text(json.dumps({"sent": sent, "seconds": elapsed}))


def rss(pid: int) -> int:
    """Current resident set size of a process, bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def write_config(path: Path, *, bootstrap: str, redis_url: str, window: int, retention: int, port: int) -> None:
    path.write_text(f"""
[kafka]
bootstrap_servers = "{bootstrap}"
events_topic = "{TOPIC}"
dead_letter_topic = "{TOPIC}-dlq"
releases_topic = "soak-releases"
[redis]
url = "{redis_url}"
[windows]
size_seconds = {window}
allowed_lateness_seconds = 5
max_event_delay_seconds = 5
idle_partition_timeout_seconds = 5.0
retention_seconds = {retention}
[budget]
epsilon = 1000000.0
delta = 0.01
[releases.topk]
enabled = true
k_bar = 1000
[releases.alerts]
enabled = true
[releases.sample]
enabled = true
[releases.histogram]
enabled = false
[metrics]
port = {port}
host = "127.0.0.1"
""")


def growth(series: list[tuple[float, int]], t_from: float, t_end: float) -> float:
    """(mean over the last minute before ``t_end``) / (mean over the minute from ``t_from``) - 1."""
    early = [v for t, v in series if t_from <= t < t_from + 60]
    late = [v for t, v in series if t_end - 60 <= t < t_end]
    if not early or not late or sum(early) == 0:
        return math.nan
    return (sum(late) / len(late)) / (sum(early) / len(early)) - 1.0


def plot(path: Path, samples: list[dict[str, Any]], stream_end: float) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib not installed (extras eval, test): no plot", file=sys.stderr)
        return False
    t = [s["t"] / 60 for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name in samples[0]["rss"]:
        if name != "broker":
            ax1.plot(t, [s["rss"].get(name, 0) / 2**20 for s in samples], label=name)
    ax1.set_ylabel("RSS (MiB)")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="upper left", fontsize=8)
    if "broker" in samples[0]["rss"]:  # the embedded dev broker keeps the topic in memory: its own scale
        broker = ax1.twinx()
        broker.plot(t, [s["rss"].get("broker", 0) / 2**20 for s in samples], color="grey", linestyle=":",
                    label="broker (Tansu, right axis)")
        broker.set_ylabel("broker RSS (MiB)")
        broker.legend(loc="lower right", fontsize=8)
    ax2.plot(t, [s["redis_used_memory"] / 2**20 for s in samples], color="black", label="Redis used_memory")
    ax2.set_ylabel("Redis (MiB)")
    ax2.set_xlabel("minutes")
    for ax in (ax1, ax2):
        ax.axvline(stream_end / 60, color="grey", linestyle="--", linewidth=1)
        ax.grid(alpha=0.3)
    ax2.legend(loc="upper left", fontsize=8)
    fig.suptitle("soak: memory per process and Redis (dashed: end of the stream, then drain)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def run(args: argparse.Namespace) -> dict[str, Any]:
    with DevStack() as stack, tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        from stream_dp import topics
        from stream_dp.config import KafkaConfig

        # the topic contract, as `stream-dp topics create` makes it for the workers' config below
        topics.create(KafkaConfig(bootstrap_servers=stack.bootstrap_servers, events_topic=TOPIC,
                                  dead_letter_topic=f"{TOPIC}-dlq", releases_topic="soak-releases",
                                  events_partitions=PARTITIONS))
        r = redis.Redis.from_url(stack.redis_url)
        procs: dict[str, subprocess.Popen] = {}
        logs = []
        try:
            ports = {}
            for name in ("ingest", "release"):
                cfg = Path(tmp) / f"{name}.toml"
                ports[name] = free_port()
                write_config(cfg, bootstrap=stack.bootstrap_servers, redis_url=stack.redis_url, window=args.window,
                             retention=args.retention, port=ports[name])
                log = open(Path(tmp) / f"{name}.log", "wb")
                logs.append(log)
                procs[name] = subprocess.Popen([sys.executable, "-m", f"workers.{name}", "--config", str(cfg)],
                                               cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
            time.sleep(3)  # let the workers start
            baseline = int(r.info("memory")["used_memory"])
            stream_seconds = args.minutes * 60
            procs["producer"] = subprocess.Popen(
                [sys.executable, "-m", "bench.soak", "--produce-child", stack.bootstrap_servers, str(args.rate),
                 str(args.users), str(stream_seconds), str(args.seed), str(Path(tmp) / "producer.json")], cwd=REPO)
            trickle: subprocess.Popen | None = None
            samples: list[dict[str, Any]] = []
            t0 = time.monotonic()
            end = stream_seconds + args.drain
            next_at = 0.0
            while True:
                t = time.monotonic() - t0
                if t >= end:
                    break
                if t >= stream_seconds and trickle is None:
                    procs["producer"].wait()
                    produced = json.loads((Path(tmp) / "producer.json").read_text())
                    trickle = procs["trickle"] = subprocess.Popen(
                        [sys.executable, "-m", "bench.soak", "--produce-child", stack.bootstrap_servers, "20",
                         str(args.users), str(args.drain + 5), str(args.seed + 1)], cwd=REPO)
                for name in ("ingest", "release"):
                    if procs[name].poll() is not None:
                        raise RuntimeError(f"{name} worker exited with {procs[name].returncode}; see its log in {tmp}")
                if t >= next_at:
                    pids = {"ingest loop": procs["ingest"].pid, "release": procs["release"].pid,
                            "redis-server": stack.redis.pid, "broker": stack.broker.pid}
                    for i, c in enumerate(children(procs["ingest"].pid)):
                        pids["ingest applier" if i == 0 else f"ingest child {i}"] = c
                    info = r.info("memory")
                    samples.append({"t": round(t, 1), "rss": {n: rss(p) for n, p in pids.items() if p},
                                    "redis_used_memory": int(info["used_memory"]),
                                    "redis_keys": int(r.dbsize()),
                                    "windows_released": int(r.zcard(Keys("sdp").release_index("released")))})
                    s = samples[-1]
                    print(f"t={t / 60:5.1f} min  " + "  ".join(f"{n} {v / 2**20:.0f}M" for n, v in s["rss"].items())
                          + f"  redis {s['redis_used_memory'] / 2**20:.1f}M keys {s['redis_keys']}", flush=True)
                    next_at += args.interval
                time.sleep(min(1.0, max(0.0, next_at - (time.monotonic() - t0))))
            ingest_counts = ingest_event_counts(ports["ingest"])
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs.values():
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()
            r.close()

    t_from, t_end = args.from_minute * 60.0, float(stream_seconds)
    # every process seen (the applier may start after the first sample), each over the samples it was in
    names = list(dict.fromkeys(n for s in samples for n in s["rss"]))
    per_process = {n: [(s["t"], s["rss"][n]) for s in samples if n in s["rss"]] for n in names}
    result = {
        "bench": "soak", "minutes": args.minutes, "rate": args.rate, "users": args.users, "window_s": args.window,
        "retention_s": args.retention, "interval_s": args.interval, "from_minute": args.from_minute,
        "rss_growth": {n: growth(v, t_from, t_end) for n, v in per_process.items()},
        "rss_mib_at_from_minute": {n: next((b for a, b in v if a >= t_from), 0) / 2**20 for n, v in per_process.items()},
        "rss_mib_at_stream_end": {n: next((b for a, b in reversed(v) if a <= t_end), 0) / 2**20
                                  for n, v in per_process.items()},
        "redis_growth": growth([(s["t"], s["redis_used_memory"]) for s in samples], t_from, t_end),
        "redis_baseline_mib": baseline / 2**20,
        "redis_peak_mib": max(s["redis_used_memory"] for s in samples) / 2**20,
        "redis_after_drain_mib": samples[-1]["redis_used_memory"] / 2**20,
        "redis_after_drain_over_baseline_mib": (samples[-1]["redis_used_memory"] - baseline) / 2**20,
        "windows_released": samples[-1]["windows_released"],
        "producer_events_per_s": produced["sent"] / produced["seconds"],
        "ingest_events": ingest_counts,
    }
    # A run only measures memory at the stated load if the producer kept its rate and ingest kept up:
    # otherwise windows close late (or not at all) and state piles up for reasons that are not the workers'.
    expected_windows = math.floor(stream_seconds / args.window) - 1
    problems = [p for p, bad in (
        (f"the producer sent {result['producer_events_per_s']:.0f} events/s, not {args.rate:g}",
         result["producer_events_per_s"] < 0.98 * args.rate),
        (f"{ingest_counts['rejected']:.0f} events were dead-lettered", ingest_counts["rejected"] > 0),
        (f"{result['windows_released']} windows released, expected at least {expected_windows}",
         result["windows_released"] < expected_windows),
    ) if bad]
    result["valid"], result["problems"] = not problems, problems
    if args.out:
        Path(args.out).write_text(json.dumps({"result": result, "samples": samples}, indent=1))
    if args.plot:
        plot(Path(args.plot), samples, t_end)
    return result


def ingest_event_counts(port: int) -> dict[str, float]:
    """The ingest worker's event counters from its /metrics: consumed, applied, bounded, rejected (all reasons)."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    totals = {"consumed": 0.0, "applied": 0.0, "bounded": 0.0, "rejected": 0.0}
    for family in text_string_to_metric_families(text):
        for name in totals:
            if family.name == f"stream_dp_ingest_events_{name}":
                totals[name] += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return totals


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--replot":  # --replot SERIES.json PLOT.png: draw a saved run again
        saved = json.loads(Path(argv[1]).read_text())
        plot(Path(argv[2]), saved["samples"], saved["result"]["minutes"] * 60)
        return 0
    if argv and argv[0] == "--produce-child":
        bootstrap, rate, users, seconds, seed = argv[1], float(argv[2]), int(argv[3]), float(argv[4]), int(argv[5])
        produce(bootstrap, rate, users, seconds, seed, argv[6] if len(argv) > 6 else "")
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="length of the stream")
    p.add_argument("--rate", type=float, default=20_000.0, help="events per second")
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--window", type=int, default=120, help="window size, seconds")
    p.add_argument("--retention", type=int, default=60, help="seconds a released window is kept")
    p.add_argument("--drain", type=float, default=None,
                   help="seconds of trickle after the stream (default: 2 windows + retention + 60)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--from-minute", type=float, default=10.0, help="growth is measured from this minute")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="", help="write the series as JSON here")
    p.add_argument("--plot", default="", help="write a PNG plot of the series here")
    p.add_argument("--smoke", action="store_true",
                   help="a short check of the whole path (~1 min): 0.4 min at 1000 events/s, 6 s windows")
    args = p.parse_args(argv)
    if args.smoke:
        args.minutes, args.rate, args.users, args.window, args.retention = 0.4, 1000.0, 2000, 6, 5
        args.interval, args.from_minute, args.drain = 2.0, 0.1, 30.0
    if args.drain is None:
        args.drain = 2 * args.window + args.retention + 60
    result = run(args)
    print("\n| process | RSS at minute {0:g} | RSS at stream end | growth |\n|---|---|---|---|".format(args.from_minute))
    for n, g in result["rss_growth"].items():
        print(f"| {n} | {result['rss_mib_at_from_minute'][n]:.0f} MiB | {result['rss_mib_at_stream_end'][n]:.0f} MiB "
              f"| {g:+.1%} |")
    print(f"\nRedis used_memory: baseline {result['redis_baseline_mib']:.1f} MiB, peak {result['redis_peak_mib']:.1f} MiB, "
          f"after the drain {result['redis_after_drain_mib']:.1f} MiB; growth over the stream {result['redis_growth']:+.1%}")
    print(f"producer {result['producer_events_per_s']:.0f} events/s; ingest events "
          + ", ".join(f"{k} {v:,.0f}" for k, v in result["ingest_events"].items())
          + f"; {result['windows_released']} windows released")
    if not result["valid"]:
        print("NOT A VALID RUN (the machine could not carry the load): " + "; ".join(result["problems"]))
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

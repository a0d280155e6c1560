"""Chaos run: real broker, real redis-server (AOF), real worker processes, and a seeded schedule of faults.

    python -m bench.chaos --seed 7 --ingest-kills 100 --release-kills 50 --broker-pauses 10 --redis-restarts 10

A multi-window stream is produced up front (keyed by user, 4 partitions); two ingest workers and one
release worker (``python -m workers.ingest`` / ``workers.release``) consume it while the schedule SIGKILLs
ingest workers and restarts them at once (churn), SIGKILLs the release worker (restarted at once),
pauses the broker (SIGSTOP … SIGCONT) and restarts Redis (SIGKILL, then start again on its AOF). Then it
waits until every event is committed and every closed window is released, stops the workers, and checks:

- the counts in Redis equal :func:`oracle` — computed here from the produced events with this file's
  own bounding rule, not production's — exactly, window by window;
- each (window, type) has exactly one distinct record on the releases topic (a republished record is
  byte-identical);
- ``budget verify`` passes for every period, and what the ledger says was spent equals the composition of
  the costs in the published records.

``tests/chaos/`` runs small schedules of this in CI; this script runs long ones and prints the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.results import emit

REPO = Path(__file__).resolve().parents[1]
T0 = 1_800_000_000  # event time of the first window (aligned to every window size used here)
PARTITIONS = 4
RELEASE_TYPES = ("topk", "alerts", "sample")


@dataclass(frozen=True)
class Plan:
    """What to run: the stream, the workers, and how many faults of each kind (order and timing seeded)."""

    seed: int = 7
    events: int = 40_000
    users: int = 3_000
    keys: int = 400
    windows: int = 6  # windows that must close and be released; one more stays open at the end
    window_seconds: int = 60
    max_keys_per_user: int = 3
    ingest_workers: int = 2
    release_workers: int = 1
    ingest_kills: int = 12
    release_kills: int = 4
    broker_pauses: int = 2
    redis_restarts: int = 2
    fault_interval: float = 2.0  # mean seconds between faults (uniform in [0.5, 1.5] x this)
    fixed_interval: bool = False  # True: exactly fault_interval apart, in a fixed order (regression runs)
    drain_timeout: float = 240.0


@dataclass
class Result:
    plan: Plan
    faults: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    schedule: list[str] = field(default_factory=list)
    counts_exact: bool = False
    count_mismatches: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)
    events_missing: int = 0
    releases: dict[tuple[int, str], int] = field(default_factory=dict)  # distinct records per (window, type)
    budget_ok: bool = False
    budget_problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def releases_exact(self) -> bool:
        want = {(T0 + i * self.plan.window_seconds, t) for i in range(self.plan.windows) for t in RELEASE_TYPES}
        return self.plan.release_workers == 0 or (set(self.releases) >= want and
                                                  all(n == 1 for n in self.releases.values()))

    @property
    def exact(self) -> bool:
        return self.counts_exact and self.releases_exact and (self.plan.release_workers == 0 or self.budget_ok)

    def summary(self) -> str:
        p = self.plan
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"

        def yes(ok: bool) -> str:
            return "n/a (no release worker)" if not p.release_workers else ("yes" if ok else "no")
        return (f"chaos seed {p.seed}: faults: {faults}; {p.windows} windows released of {p.window_seconds}s "
                f"({p.windows + 1} counted), {p.events:,} events over {PARTITIONS} partitions, "
                f"{p.ingest_workers} ingest + {p.release_workers} release workers; counts exact: "
                f"{'yes' if self.counts_exact else f'no ({self.events_missing} events missing)'}; releases one per "
                f"(window, type): {yes(self.releases_exact)}; budget verify + spent = published: "
                f"{yes(self.budget_ok)}; exact: {'yes' if self.exact else 'no'}; {self.seconds:.0f} s")


# --- the stream and its oracle ------------------------------------------------------------------------


def make_stream(plan: Plan) -> list[dict[str, Any]]:
    """Events in event-time order over ``plan.windows`` windows, then a closing burst in the next window
    (every partition's time passes the last window's end). Time order in the list = offset order in each
    partition, so no event is late."""
    rnd = random.Random(plan.seed)
    span = plan.windows * plan.window_seconds
    out = []
    for i in range(plan.events):
        ts = T0 + span * i / plan.events
        key = f"item-{min(int(rnd.paretovariate(0.9)), plan.keys)}"
        out.append({"user": f"user-{rnd.randrange(plan.users)}", "key": key, "ts": round(ts, 3)})
    closing = T0 + span + plan.window_seconds / 2
    for u in range(0, plan.users, max(1, plan.users // 200)):  # ~200 users: every partition gets some
        out.append({"user": f"user-{u}", "key": "item-closing", "ts": closing})
    return out


def oracle(events: list[dict[str, Any]], *, window_seconds: int, max_keys: int) -> dict[int, dict[str, int]]:
    """The exact counts, independently of production code: per window, a key counts each distinct user
    once, and each user adds to at most ``max_keys`` distinct keys — the first ones in the user's order."""
    kept: dict[tuple[int, str], list[str]] = defaultdict(list)  # (window, user) → keys counted, in order
    counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for ev in events:
        start = int(ev["ts"] // window_seconds) * window_seconds
        mine = kept[(start, ev["user"])]
        if ev["key"] in mine or len(mine) >= max_keys:
            continue
        mine.append(ev["key"])
        counts[start][ev["key"]] += 1
    return {w: dict(c) for w, c in counts.items()}


# --- processes ----------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def _preexec() -> None:  # pragma: no cover - runs in the child
    from stream_dp.processes import die_with_parent

    die_with_parent(signal.SIGKILL)


class Worker:
    """One worker process slot: started, SIGKILLed and restarted at once, stopped gracefully at the end."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.argv, self.log_path = argv, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_preexec)

    def kill_and_restart(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.start()

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode


def _write_config(path: Path, plan: Plan, bootstrap: str, redis_url: str) -> Path:
    sections = {
        "kafka": {"bootstrap_servers": bootstrap, "events_topic": "events", "releases_topic": "releases",
                  "dead_letter_topic": "events-dlq", "ingest_group_id": "chaos-ingest", "max_poll_records": 500,
                  "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "events_partitions": PARTITIONS},
        "redis": {"url": redis_url, "key_prefix": "chaos"},
        "windows": {"size_seconds": plan.window_seconds, "allowed_lateness_seconds": 1,
                    "idle_partition_timeout_seconds": 10.0, "start": str(T0), "max_event_delay_seconds": 1},
        "contribution": {"max_keys_per_user": plan.max_keys_per_user},
        "ingest": {"backoff_initial_seconds": 0.05, "backoff_max_seconds": 1.0, "poll_timeout_ms": 200},
        "budget": {"epsilon": 1000.0, "delta": 0.01},
        "metrics": {"port": 0},
        # the types RELEASE_TYPES names, whatever the defaults enable
        **{f"releases.{t}": {"enabled": t in RELEASE_TYPES} for t in ("topk", "alerts", "sample", "histogram")},
    }
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in values.items())
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the run ------------------------------------------------------------------------------------------


def schedule(plan: Plan) -> list[tuple[float, str]]:
    """(delay before it, fault) in order; seeded by ``plan.seed``."""
    rnd = random.Random(plan.seed)
    kinds = (["ingest_kill"] * plan.ingest_kills + ["release_kill"] * plan.release_kills
             + ["broker_pause"] * plan.broker_pauses + ["redis_restart"] * plan.redis_restarts)
    if not plan.fixed_interval:
        rnd.shuffle(kinds)
    return [(plan.fault_interval if plan.fixed_interval else rnd.uniform(0.5, 1.5) * plan.fault_interval, k)
            for k in kinds]


def run(plan: Plan, workdir: Path, *, log: Callable[[str], None] = print) -> Result:
    from kafka import KafkaProducer

    from stream_dp import topics
    from stream_dp.config import load_config
    from stream_dp.dev.devstack import DevStack

    t_start = time.monotonic()
    result = Result(plan)
    rnd = random.Random(plan.seed + 1)
    stack = DevStack(redis_persistence=True, workdir=workdir / "stack").start()
    workers: list[Worker] = []
    try:
        cfg_path = _write_config(workdir / "chaos.toml", plan, stack.bootstrap_servers, stack.redis_url)
        topics.create(load_config(cfg_path, environ={}).kafka)  # as `stream-dp topics create`: the contract
        events = make_stream(plan)
        producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all", linger_ms=20,
                                 batch_size=256 * 1024)
        for ev in events:
            # stamped with the event time, as a collector or `stream-dp replay` does (the trusted clock)
            producer.send("events", key=ev["user"].encode(), value=json.dumps(ev).encode(),
                          timestamp_ms=int(round(ev["ts"] * 1000)))
        producer.flush()
        producer.close()
        ingest = [Worker([sys.executable, "-m", "workers.ingest", "--config", str(cfg_path)],
                         workdir / f"ingest-{i}.log") for i in range(plan.ingest_workers)]
        release = [Worker([sys.executable, "-m", "workers.release", "--config", str(cfg_path), "--worker-id",
                           f"release-{i}", "--poll-seconds", "0.1", "--claim-ttl-seconds", "2"],
                          workdir / f"release-{i}.log") for i in range(plan.release_workers)]
        workers = ingest + release
        for w in workers:
            w.start()
        for delay, kind in schedule(plan):
            time.sleep(delay)  # the schedule's own pacing (wall-clock faults), not a wait for a condition
            if kind == "ingest_kill":
                i = rnd.randrange(len(ingest))
                ingest[i].kill_and_restart()
                what = f"ingest-{i} SIGKILL + restart"
            elif kind == "release_kill" and release:
                i = rnd.randrange(len(release))
                release[i].kill_and_restart()
                what = f"release-{i} SIGKILL + restart"
            elif kind == "broker_pause":
                pause = rnd.uniform(0.5, 3.0)
                os.kill(stack.broker.pid, signal.SIGSTOP)  # type: ignore[union-attr, arg-type]
                try:
                    time.sleep(pause)  # the length of the fault itself
                finally:
                    os.kill(stack.broker.pid, signal.SIGCONT)  # type: ignore[union-attr, arg-type]
                what = f"broker paused {pause:.1f}s"
            elif kind == "redis_restart":
                stack.redis.kill()  # type: ignore[union-attr]
                stack.redis.start()  # type: ignore[union-attr]
                what = "redis SIGKILL + restart (AOF)"
            else:
                continue
            result.faults[kind] += 1
            result.schedule.append(what)
        log(f"chaos seed {plan.seed}: schedule done ({len(result.schedule)} faults), draining")
        _drain(plan, stack, ingest, release)
        for w in workers:
            w.stop()
        _check(plan, stack, events, result)
    finally:
        for w in workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(timeout=30)
        stack.stop()
    result.seconds = time.monotonic() - t_start
    return result


def _committed_all(bootstrap: str) -> bool:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id="chaos-ingest", enable_auto_commit=False)
    try:
        tps = [TopicPartition("events", p) for p in range(PARTITIONS)]
        ends = c.end_offsets(tps)
        # Tansu under-reports end_offsets; the fetched high-water mark is exact, so read it via a probe
        probe = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        try:
            probe.assign(tps)
            probe.seek_to_end()
            hw = {tp: probe.position(tp) for tp in tps}
        finally:
            probe.close()
        return all((c.committed(tp) or 0) >= max(ends.get(tp) or 0, hw[tp]) for tp in tps)
    finally:
        c.close()


def _released_windows(redis_url: str, plan: Plan) -> int:
    import redis

    from stream_dp.store.keys import Keys
    from stream_dp.release.windows import Window, WindowReader

    client = redis.Redis.from_url(redis_url)
    try:
        reader = WindowReader(client, keys=Keys("chaos"), size_seconds=plan.window_seconds)
        return sum(reader.is_released(Window(T0 + i * plan.window_seconds, T0 + (i + 1) * plan.window_seconds))
                   for i in range(plan.windows))
    finally:
        client.close()


def _drain(plan: Plan, stack: Any, ingest: list[Worker], release: list[Worker]) -> None:
    deadline = time.monotonic() + plan.drain_timeout
    while True:
        done = _committed_all(stack.bootstrap_servers) and (
            not release or _released_windows(stack.redis_url, plan) == plan.windows)
        if done:
            return
        for w in ingest + release:
            if w.proc is not None and w.proc.poll() is not None:
                raise AssertionError(f"{w.log_path.name} exited with {w.proc.returncode}:\n"
                                     + w.log_path.read_text()[-3000:])
        if time.monotonic() > deadline:
            raise AssertionError(f"not drained within {plan.drain_timeout}s (all committed and "
                                 f"{plan.windows} windows released)")
        time.sleep(0.5)


def _check(plan: Plan, stack: Any, events: list[dict[str, Any]], result: Result) -> None:
    import redis
    from kafka import KafkaConsumer

    from stream_dp.accounting.budget import BudgetCap
    from stream_dp.accounting.composition import compose
    from stream_dp.accounting.ledger import Ledger
    from stream_dp.ingest.store import WindowStore
    from stream_dp.store.keys import Keys
    from stream_dp.release.records import events_of

    truth = oracle(events, window_seconds=plan.window_seconds, max_keys=plan.max_keys_per_user)
    client = redis.Redis.from_url(stack.redis_url)
    try:
        store = WindowStore(client, keys=Keys("chaos"), window_size=plan.window_seconds,
                            max_keys_per_user=plan.max_keys_per_user)
        for start, want in truth.items():
            got = store.counts(start)
            if got != want:
                diff = {k: (got.get(k, 0), want.get(k, 0)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
                result.count_mismatches[start] = diff
                result.events_missing += sum(w - g for g, w in diff.values())
        result.counts_exact = not result.count_mismatches
        if not plan.release_workers:
            return
        consumer = KafkaConsumer("releases", bootstrap_servers=stack.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000, enable_auto_commit=False)
        distinct: dict[tuple[int, str], set[bytes]] = defaultdict(set)
        records: dict[tuple[int, str], dict[str, Any]] = {}
        for rec in consumer:
            body = json.loads(rec.value)
            key = (body["window"]["start"], body["type"])
            stored = {k: v for k, v in body.items() if k != "budget"}  # the budget block is read at publish time
            distinct[key].add(json.dumps(stored, sort_keys=True).encode())
            records[key] = body
        consumer.close()
        result.releases = {k: len(v) for k, v in distinct.items()}
        ledger = Ledger(client, BudgetCap(1000.0, 0.01, 1e-7), keys=Keys("chaos"))
        by_scope: dict[str, list[Any]] = defaultdict(list)
        for body in records.values():
            by_scope[body["budget"]["scope"]].extend(events_of(body))
        problems = []
        for scope in ledger.scopes():
            report = ledger.verify(scope)
            if not report.ok:
                problems.append(f"{scope}: verify: {report.problems}")
            spent = ledger.remaining(scope).spent
            published = compose(by_scope.get(scope, []))
            if abs(spent.rho - published.rho) > 1e-9 or abs(spent.basic_epsilon - published.basic_epsilon) > 1e-9:
                problems.append(f"{scope}: ledger spent ρ={spent.rho} ε={spent.basic_epsilon}, published "
                                f"ρ={published.rho} ε={published.basic_epsilon}")
        result.budget_problems = problems
        result.budget_ok = not problems and bool(ledger.scopes())
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Plan):
        name, default = f.name, f.default
        if isinstance(default, bool):
            p.add_argument(f"--{name.replace('_', '-')}", action="store_true")
        else:
            p.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    p.add_argument("--workdir", help="keep the stack's and workers' logs here")
    args = vars(p.parse_args(argv))
    workdir = Path(args.pop("workdir") or tempfile.mkdtemp(prefix="stream-dp-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    plan = Plan(**args)
    result = run(plan, workdir)
    print(result.summary())
    if result.count_mismatches:
        print("count mismatches (got, want):", json.dumps({str(k): {kk: list(vv) for kk, vv in v.items()}
                                                           for k, v in result.count_mismatches.items()})[:2000])
    for problem in result.budget_problems:
        print("budget:", problem)
    print(f"logs in {workdir}")
    emit({"bench": "chaos", "seed": plan.seed, "faults": dict(result.faults), "events": plan.events,
          "windows": plan.windows, "events_missing": result.events_missing, "counts_exact": result.counts_exact,
          "releases_exact": result.releases_exact, "budget_ok": result.budget_ok, "exact": result.exact,
          "seconds": result.seconds})
    return 0 if result.exact else 1


if __name__ == "__main__":
    sys.exit(main())

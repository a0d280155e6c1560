"""The latency cost of ``redis.min_replicas_acked``: a ledger charge confirmed on replicas vs not.

On a local Redis Cluster of 3 masters + 3 replicas (:mod:`tests.support.devcluster`, loopback, no
persistence), each sample is what the release path does between "the mechanism ran" and "the record may be
sent": one ledger charge that stores the release (``Ledger.charge`` with a payload, one Lua script on the
scope's master) followed by ``Ledger.confirm`` (a fence write + ``WAIT`` on that master's connection, one
per ledger slot). Run with ``min_replicas_acked`` = 0 (confirm is a no-op) and = 1, interleaved sample by
sample so both see the same machine load. Reported: p50 / p99 / mean per mode and the added latency.

    python -m bench.bench_replication                 # 400 samples per mode (~10 s)
    python -m bench.bench_replication --samples 2000 --payload-bytes 20000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger import BudgetCap, Ledger
from tests.support.devcluster import local_cluster
from stream_dp.store.keys import Keys
from stream_dp.replication import ReplicationPolicy

from bench.results import emit


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=400, help="charges per mode (default 400)")
    ap.add_argument("--payload-bytes", type=int, default=4000, help="stored release record size (default 4000)")
    ap.add_argument("--timeout-ms", type=int, default=1000, help="redis.replication_timeout_ms (default 1000)")
    args = ap.parse_args(argv)
    payload = "x" * args.payload_bytes
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp, \
            local_cluster(Path(tmp), masters=3, replicas=1) as cluster:
        client = cluster.client()
        cap = BudgetCap(1e12, 0.5, 1e-9)
        ledgers = {n: Ledger(client, cap, keys=Keys(f"bench{n}"), replication=ReplicationPolicy(n, args.timeout_ms))
                   for n in (0, 1)}
        times: dict[int, list[float]] = {0: [], 1: []}
        for i in range(-20, args.samples):  # 20 warm-up rounds (script load, connections)
            for n, ledger in ledgers.items():
                rid = f"w{i}.topk"
                t0 = time.perf_counter()
                ledger.charge("2026-12-01", rid, [PureDpEvent(0.001)], payload=payload)
                ledger.confirm("2026-12-01", rid)
                if i >= 0:
                    times[n].append(time.perf_counter() - t0)
        client.close()
    summary = {n: {"p50_ms": 1e3 * statistics.median(t), "p99_ms": 1e3 * _pct(t, 0.99),
                   "mean_ms": 1e3 * statistics.fmean(t)} for n, t in times.items()}
    print(f"ledger charge + confirm, 3 masters + 3 replicas, {args.samples} samples per mode, "
          f"{args.payload_bytes}-byte stored record")
    print(f"{'min_replicas_acked':>18} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for n, s in summary.items():
        print(f"{n:>18} {s['p50_ms']:>8.3f} {s['p99_ms']:>8.3f} {s['mean_ms']:>8.3f}")
    result = {"bench": "replication", "samples": args.samples, "payload_bytes": args.payload_bytes,
              "p50_ms_wait0": summary[0]["p50_ms"], "p99_ms_wait0": summary[0]["p99_ms"],
              "p50_ms_wait1": summary[1]["p50_ms"], "p99_ms_wait1": summary[1]["p99_ms"],
              "added_p50_ms": summary[1]["p50_ms"] - summary[0]["p50_ms"],
              "added_mean_ms": summary[1]["mean_ms"] - summary[0]["mean_ms"]}
    emit(result)
    return result


if __name__ == "__main__":
    main()

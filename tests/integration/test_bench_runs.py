"""The benchmarks that start the embedded dev stack (Tansu + redis-server) run at tiny scale and end with their
JSON result line (bench/results.py; the pure ones: tests/unit/test_bench_results.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.results import run

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.mark.parametrize("module,args", [
    ("bench.bench_release", ["--keys", "2000", "--windows", "2"]),
    ("bench.bench_argmax", ["--keys", "2000", "--seeds", "1"]),  # only a redis-server
    ("bench.bench_ingest", ["--events", "30000", "--users", "500", "--keys", "500", "--sample-interval", "0.05"]),
])
def test_dev_stack_benchmarks_end_with_their_json_line_when_run(module, args) -> None:
    result = run(module, args, cwd=ROOT, timeout=240)
    assert result["bench"] == module.split("bench_")[1]


def test_soak_smoke_run_samples_memory_and_reports_growth(tmp_path) -> None:
    """``bench.soak --smoke``: workers, producer and sampling end to end; windows are released and expire."""
    result = run("bench.soak", ["--smoke", "--out", str(tmp_path / "soak.json")], cwd=ROOT, timeout=300)
    assert result["bench"] == "soak" and result["windows_released"] >= 2
    # the run checks itself: the producer's rate and ingest's counters are read back
    assert result["producer_events_per_s"] > 0 and result["ingest_events"]["consumed"] > 0
    assert result["valid"] == (not result["problems"])
    assert {"ingest loop", "ingest applier", "release", "redis-server"} <= set(result["rss_growth"])
    samples = json.loads((tmp_path / "soak.json").read_text())["samples"]
    assert len(samples) >= 10 and all(s["rss"]["ingest loop"] > 0 for s in samples)


def test_scaleout_runs_n_workers_on_both_redis_and_checks_their_counts() -> None:
    """``bench.bench_scaleout`` at small scale on Tansu (the embedded broker starts fastest): 1 and 2 real worker
    processes on one redis-server and on a 3-master cluster, each run's counts checked against the oracle.
    Tansu hands a new group's partitions to the first worker at once, which then counts while the second
    still starts (half the events at 2·10⁴ here): 10⁵ events and a low minimum share keep the run measurable."""
    result = run("bench.bench_scaleout", ["--broker", "tansu", "--events", "100000", "--users", "2000", "--keys", "2000",
                                          "--workers", "1,2", "--partitions", "4", "--shards", "4",
                                          "--min-measured-share", "0.05"],
                 cwd=ROOT, timeout=500)
    assert result["bench"] == "scaleout" and result["workers"] == [1, 2]
    for redis_kind in ("single", "cluster"):
        runs = result["results"][redis_kind]
        assert [r["workers"] for r in runs] == [1, 2]
        assert all(r["counts_checked"] and r["events_per_s"] > 0 and r["measured_share"] > 0
                   for n in runs for r in n["runs"])
        assert runs[0]["ratio"] == 1.0
    assert len(result["results"]["cluster"][0]["runs"][0]["redis_cpu_s_per_master"]) == 3


def test_release_bench_runs_on_a_three_master_cluster_with_both_layouts() -> None:
    """``bench.bench_release --cluster-masters 3`` (the mode of issue 47's 10⁷-key target) at tiny scale: a real
    3-master Redis Cluster of its own, windows RESTOREd onto it, the worker on the cluster client, the user and
    the key layout in one run with their ratio; every figure the target needs is in the JSON line."""
    result = run("bench.bench_release", ["--cluster-masters", "3", "--keys", "2000", "--windows", "2",
                                         "--layouts", "user:1,key:12"], cwd=ROOT, timeout=300)
    assert result["bench"] == "release" and result["redis"] == "cluster" and result["masters"] == 3
    assert result["keys"] == 2000 and result["ratio"]["of"] == "key:12/user:1" and result["ratio"]["p99_all_s"] > 0
    for name, layout, shards in (("user:1", "user", 1), ("key:12", "key", 12)):
        summary = result["layouts"][name]
        assert (summary["redis"], summary["masters"], summary["layout"], summary["shards"], summary["keys"],
                summary["windows"]) == ("cluster", 3, layout, shards, 2000, 2)
        assert all(summary[f"p99_{t}_s"] > 0 for t in ("all", "topk", "alerts", "sample"))
        # the releases read the restored counts: k items of top-k, a sample of the 2000 keys
        assert summary["items_median"]["topk"] == 10 and 0 < summary["items_median"]["sample"] <= 2000
        assert summary["template_payload_bytes"] > 0 and summary["open_window_s_max"] > 0
        assert len(summary["redis_peak_rss_bytes"]) == 3 and all(b > 0 for b in summary["redis_peak_rss_bytes"])
        assert summary["rss_bytes_before_windows"] > 0 and summary["baseline_full_read_s"] > 0
        assert summary["redis_round_trips_median"] > 0

"""The scale-out benchmark's pure parts (bench/bench_scaleout.py): when a group counts as settled, the ratios
to N = 1, and the worker counts it accepts. Its run end to end: tests/integration/test_bench_runs.py."""

from __future__ import annotations

import argparse
import doctest

import pytest

from bench import bench_scaleout
from bench.bench_scaleout import GroupView, per_worker_count, settled, table, with_ratios


def test_its_doctests_pass() -> None:
    """bench/ is not on pytest's doctest paths: the examples there are checked here."""
    result = doctest.testmod(bench_scaleout)
    assert result.attempted >= 4 and result.failed == 0


def _group(*members: set[int], stable: bool = True) -> GroupView:
    return GroupView(stable, tuple(frozenset(m) for m in members))


def test_a_group_is_settled_only_when_the_broker_and_every_worker_agree_on_a_full_assignment() -> None:
    full = _group({0, 1, 2}, {3, 4, 5}, {6, 7})
    assert settled(full, [3, 3, 2], 8)
    assert settled(full, [2, 3, 3], 8)  # the gauges are not matched to members by name: sizes as a multiset
    assert not settled(_group({0, 1, 2}, {3, 4, 5}, {6, 7}, stable=False), [3, 3, 2], 8)  # rebalancing
    assert not settled(full, [3, 3, 2, 0], 8)  # a fourth worker has not joined yet
    assert not settled(full, [8, 3, 2], 8)  # a gauge from an earlier generation
    assert not settled(_group({0, 1, 2}, {3, 4, 5}), [3, 3], 8)  # partitions 6 and 7 unassigned
    assert not settled(_group({0, 1, 2}, {2, 3, 4, 5, 6, 7}), [3, 6], 8)  # partition 2 twice


def test_without_the_brokers_view_the_gauges_must_cover_every_partition_with_no_idle_worker() -> None:
    assert settled(None, [3, 3, 2], 8)
    assert not settled(None, [8, 0], 8)  # the second worker has nothing yet
    assert not settled(None, [8, 4], 8)  # the first still reports its earlier assignment
    assert settled(None, [1, 1, 0], 2)  # more workers than partitions: the extra one idles


def test_ratios_and_efficiency_are_relative_to_the_smallest_worker_count() -> None:
    runs = with_ratios([{"workers": 1, "events_per_s": 200.0}, {"workers": 2, "events_per_s": 380.0},
                        {"workers": 4, "events_per_s": 400.0}])
    assert [(r["ratio"], r["efficiency"]) for r in runs] == [(1.0, 1.0), (1.9, 0.95), (2.0, 0.5)]
    without_one = with_ratios([{"workers": 2, "events_per_s": 100.0}, {"workers": 4, "events_per_s": 150.0}])
    assert [(r["ratio"], r["efficiency"]) for r in without_one] == [(1.0, 1.0), (1.5, 0.75)]


def test_the_table_has_a_row_per_worker_count_and_a_dash_where_a_redis_did_not_run_it() -> None:
    single = per_worker_count([{"workers": 1, "events_per_s": 100.0, "worker_cpu_s_per_1e6": 12.0},
                               {"workers": 2, "events_per_s": 150.0, "worker_cpu_s_per_1e6": 13.0},
                               {"workers": 2, "events_per_s": 170.0, "worker_cpu_s_per_1e6": 15.0}])
    text = table({"single": with_ratios(single), "cluster": with_ratios([{"workers": 1, "events_per_s": 90.0}])})
    lines = text.splitlines()
    assert lines[2] == "| 1 | 100 | 1.00 | 1.00 | 12.0 | 90 | 1.00 | 1.00 | – |"
    assert lines[3] == "| 2 | 160 | 1.60 | 0.80 | 14.0 | – | – | – | – |"  # medians of the two runs of N = 2


def test_worker_counts_are_positive_sorted_and_distinct() -> None:
    assert bench_scaleout._worker_counts("4,1,2,2") == [1, 2, 4]
    for bad in ("0,1", "", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--workers"):
            bench_scaleout._worker_counts(bad)

"""The garbage-collector tuning of the ingest processes (stream_dp.processes.collect_garbage_per_batches):
young collections wait for more live containers than the batches in flight hold, and cycles are still
collected without an explicit gc.collect(). Run in a child interpreter: the tuning is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import gc, weakref
    from stream_dp.processes import collect_garbage_per_batches
    assert collect_garbage_per_batches(10) == 700  # never below CPython's default
    assert collect_garbage_per_batches(5000) == 5000 and gc.get_threshold()[0] == 5000
    assert gc.get_freeze_count() > 0  # the start-up heap is out of the collector's view
    class Node:
        pass
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the cyclic collector frees it
    gone = []
    ref = weakref.ref(a, gone.append)
    del a, b
    batch = [[i] for i in range(4000)]  # a batch in flight: fewer live containers than the threshold
    assert not gone, "a collection ran while only a batch's worth of containers was alive"
    batch += [[i] for i in range(2000)]  # more live containers than the threshold
    assert gone, "the cycle was not collected once the live containers passed the threshold"
    print("ok")
""")


def test_young_collections_wait_for_the_batches_in_flight_and_cycles_are_still_collected() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


FREEZE_CHILD = textwrap.dedent("""
    import gc, weakref
    from stream_dp.processes import freeze_start_up_heap
    class Node:
        pass
    kept = [Node() for _ in range(1000)]  # start-up state: lives as long as the process
    frozen = freeze_start_up_heap()
    assert frozen == gc.get_freeze_count() and frozen > 1000
    referrers = [o for o in gc.get_objects() if o is kept]
    assert not referrers, "start-up objects are still traversed by collections"
    a, b = Node(), Node()
    a.other, b.other = b, a  # garbage made after start-up is still collected
    gone = []
    ref = weakref.ref(a, gone.append)
    del a, b
    gc.collect()
    assert gone
    print("ok")
""")


def test_the_start_up_heap_is_frozen_and_later_garbage_still_collected() -> None:
    out = subprocess.run([sys.executable, "-c", FREEZE_CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

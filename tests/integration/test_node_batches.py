"""One pipeline per master, the masters' pipelines at the same time (:func:`stream_dp.node_batches.run_batched`
on a real 3-master Redis Cluster): a batch over M masters takes the slowest master's time, not the sum."""

from __future__ import annotations

import threading

import pytest

from stream_dp.node_batches import run_batched

pytestmark = pytest.mark.integration

WAIT_SECONDS = 20.0


def _on_other_masters(cluster, first: str) -> list[str]:
    """A key on each of two masters other than ``first``'s (tags chosen by their slot's owner)."""
    taken = {cluster.get_node_from_key(first).name}
    found = []
    for i in range(1000):
        key = f"{{t{i}}}:flag"
        node = cluster.get_node_from_key(key).name
        if node not in taken:
            taken.add(node)
            found.append(key)
        if len(found) == 2:
            return found
    raise AssertionError("three masters expected")


def test_the_masters_pipelines_run_at_the_same_time(cluster):
    """The first master's pipeline blocks (``BLPOP``) until the test pushes its element, which it does only once
    the other two masters' pipelines have run: sent one after the other, they would wait for the first (the
    broken variant times out: the flags are never set while the first master waits)."""
    queue = "{t-queue}:q"
    flags = _on_other_masters(cluster, queue)
    items = [(queue, lambda pipe: pipe.blpop([queue], timeout=WAIT_SECONDS + 10))]
    items += [(flag, lambda pipe, flag=flag: pipe.set(flag, "ran")) for flag in flags]
    out: list = []
    batch = threading.Thread(target=lambda: out.append(run_batched(cluster, items)))
    batch.start()
    others = [cluster.get_redis_connection(cluster.get_node_from_key(f)) for f in flags]
    try:
        ran = _wait_for(lambda: all(o.get(f) == b"ran" for o, f in zip(others, flags)))
        assert ran, "the other masters' pipelines did not run while the first master's was waiting"
    finally:
        cluster.get_redis_connection(cluster.get_node_from_key(queue)).rpush(queue, "go")  # unblock either way
        batch.join(WAIT_SECONDS + 15)
    assert out == [[(queue.encode(), b"go"), True, True]]


def _wait_for(condition, deadline: float = WAIT_SECONDS) -> bool:
    """Poll ``condition`` until it holds or ``deadline`` seconds passed."""
    stop = threading.Event()
    timer = threading.Timer(deadline, stop.set)
    timer.start()
    try:
        while not stop.is_set():
            if condition():
                return True
            stop.wait(0.02)
        return condition()
    finally:
        timer.cancel()

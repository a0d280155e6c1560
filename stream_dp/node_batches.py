"""Pipelines that work on a single Redis and on a Redis Cluster alike: one batch per master.

redis-py's cluster pipeline refuses scripts (``EVALSHA``) and a cluster cannot run one pipeline across
masters anyway. :func:`run_batched` takes ``(key, queue)`` pairs -- ``queue`` puts commands on keys of
``key``'s slot into a pipeline -- and runs one plain pipeline per owning master, the masters' pipelines at the
same time (:func:`in_parallel`; on a single Redis: one pipeline), returning the replies in the order of the pairs. No atomicity across pairs is
implied on either deployment (each pair's atomicity is its own script's).

A MOVED/ASK/CLUSTERDOWN reply (the slot's master changed in a failover or a resharding) refreshes the
client's slot map and raises :class:`SlotMoved`, a ``redis.ConnectionError``: the workers' loops treat it
as a Redis outage and retry the whole batch (every script the service batches is idempotent per its
offset record or fencing token, so a pair that did run before the error is refused or repeated harmlessly).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import redis
from redis.client import Pipeline

from stream_dp.errors import StreamDPError

__all__ = ["Pending", "ReadStep", "Reads", "RideAlong", "SlotMoved", "evalsha_item", "in_parallel", "is_cluster", "joined", "load_scripts", "node_client", "refresh_slots",
           "run_batched", "run_in_order", "run_reads", "run_with_scripts"]

#: Replies meaning "the key's master is changing" (failover, resharding, loading): retry later.
FAILOVER_ERRORS = (redis.exceptions.AskError, redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError,
                   redis.exceptions.ReadOnlyError, redis.exceptions.MasterDownError,
                   redis.exceptions.SlotNotCoveredError)


T = TypeVar("T")


class SlotMoved(redis.ConnectionError, StreamDPError):
    """A slot's master changed while a batch ran (failover or resharding); retry the batch."""


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is redis-py's cluster client."""
    return isinstance(client, redis.RedisCluster)


def node_client(client: Any, key: str) -> Any:
    """The client to send ``key``'s commands on: on a cluster the master that owns its slot (a plain client
    of that node, which accepts scripts in pipelines), else ``client`` itself."""
    if is_cluster(client):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


def refresh_slots(client: Any) -> None:
    """After a MOVED or a dead master: let the cluster client re-read the slot map (best effort)."""
    if not is_cluster(client):
        return
    try:
        client.nodes_manager.initialize()
    except redis.RedisError:  # every startup node may be down for a moment; the next call retries
        pass


def run_batched(client: Any, items: Sequence[tuple[str, Callable[[Pipeline], object]]]) -> list[Any]:
    """Run each ``queue(pipeline)`` of ``items`` in a pipeline of the master owning its ``key``; return
    all replies in item order (a ``queue`` may add several commands: their replies follow each other).
    Errors of the commands propagate (the first one) after every pipeline ran, as redis-py does."""
    if not is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for _, queue in items:
            queue(pipe)
        return pipe.execute()
    groups: dict[str, list[int]] = {}
    nodes: dict[str, Any] = {}
    for i, (key, _) in enumerate(items):
        node = client.get_node_from_key(key)
        groups.setdefault(node.name, []).append(i)
        nodes[node.name] = node
    replies: list[list[Any]] = [[] for _ in items]
    first_error: BaseException | None = None
    pipes = []
    for name, indexes in groups.items():
        pipe = client.get_redis_connection(nodes[name]).pipeline(transaction=False)
        sizes = []
        for i in indexes:
            before = len(pipe)
            items[i][1](pipe)
            sizes.append(len(pipe) - before)
        pipes.append((pipe, indexes, sizes))
    try:
        outs = in_parallel([partial(pipe.execute, raise_on_error=False) for pipe, _, _ in pipes])
    except (redis.ConnectionError, redis.TimeoutError):
        refresh_slots(client)
        raise
    for (_, indexes, sizes), out in zip(pipes, outs):
        pos = 0
        for i, size in zip(indexes, sizes):
            replies[i] = out[pos:pos + size]
            pos += size
        for reply in out:
            if isinstance(reply, FAILOVER_ERRORS):
                refresh_slots(client)
                raise SlotMoved(f"a slot's master changed during a batch ({type(reply).__name__}); retrying")
            if isinstance(reply, Exception) and first_error is None:
                first_error = reply
    if first_error is not None:
        raise first_error
    return [reply for per_item in replies for reply in per_item]


_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the pid that made it, the pool): a forked child makes its own


def in_parallel(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Each call's result, in order, the calls run at the same time on threads (one per master's pipeline:
    a batch over M masters then takes the slowest master's time, not the sum; the socket waits release the
    GIL). One call runs on the caller's thread. Every call is waited for; then the first error in call
    order is raised (as one pipeline after another would have, minus the pipelines it would have skipped).
    """
    global _pool
    if len(calls) <= 1:
        return [call() for call in calls]
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(max_workers=32, thread_name_prefix="redis-master"))
    futures = [_pool[1].submit(call) for call in calls]
    wait(futures)
    return [f.result() for f in futures]


class Reads:
    """Independent reads of one module, to be sent together with other modules' (:func:`run_reads`): the
    ``(key, queue)`` items (one command each) and ``parse``, which turns their replies into the result."""

    def __init__(self, items: Sequence[tuple[str, Callable[[Pipeline], object]]],
                 parse: Callable[[list[Any]], Any], scripts: Sequence[Any] = (), *, client: Any = None) -> None:
        self.items = list(items)
        self.parse = parse
        self.scripts = list(scripts)  # the scripts its items run by SHA (evalsha_item)
        self.client = client  # the client :meth:`now` sends them on (the store's that made them)

    def now(self) -> Any:
        """Send these reads now, in a round trip of their own, and return the parsed result (the other way to
        use them: queued on a :class:`RideAlong` with :meth:`RideAlong.read`, to go with another step)."""
        if self.client is None:
            raise RuntimeError("these reads were made without a client: send them with run_reads")
        return run_reads(self.client, self)[0]


def joined(*reads: Reads) -> Reads:
    """``reads`` as one :class:`Reads`, their items in order; it parses to the list of each one's result."""

    def parse(replies: list[Any]) -> list[Any]:
        out, pos = [], 0
        for r in reads:
            out.append(r.parse(replies[pos:pos + len(r.items)]))
            pos += len(r.items)
        return out

    return Reads([item for r in reads for item in r.items], parse, [sc for r in reads for sc in r.scripts])


def run_reads(client: Any, *reads: Reads) -> list[Any]:
    """Send every read of ``reads`` in one :func:`run_batched` (one round trip on a single Redis, one per
    master on a cluster) and return each ``parse``'s result, in order. Only for reads: no order among them."""
    together = joined(*reads)
    replies = run_with_scripts(client, together.items, together.scripts, ordered=False) if together.items else []
    return together.parse(replies)


Item = tuple[str, Callable[[Pipeline], object]]


def evalsha_item(script: Any, keys: Sequence[str], args: Sequence[Any]) -> Item:
    """A ``(key, queue)`` item that runs the registered ``script`` (a redis-py ``Script``) by its SHA.

    Sent with :func:`run_with_scripts`, which loads the script and repeats the batch when Redis lacks it
    (a restarted or flushed Redis). redis-py's own script-in-pipeline support would add a ``SCRIPT EXISTS``
    round trip to every batch."""
    keys, args = list(keys), list(args)
    return keys[0], lambda pipe: pipe.evalsha(script.sha, len(keys), *keys, *args)


def run_in_order(client: Any, items: Sequence[Item]) -> list[Any]:
    """:func:`run_batched`, keeping the order of the items *across* masters: on a cluster, each maximal run
    of consecutive items on one master is one pipeline, and the runs go one after the other (so an item
    never runs before an earlier one, whatever slots they are in; errors propagate at once). On a single
    Redis it is one pipeline, which runs its commands in order on one connection."""
    if not is_cluster(client) or not items:
        return run_batched(client, items)
    replies: list[Any] = []
    run: list[Item] = []
    node = None
    for item in items:
        name = client.get_node_from_key(item[0]).name
        if run and name != node:
            replies.extend(run_batched(client, run))
            run = []
        run.append(item)
        node = name
    replies.extend(run_batched(client, run))
    return replies


def run_with_scripts(client: Any, items: Sequence[Item], scripts: Sequence[Any] = (), *,
                     ordered: bool = True) -> list[Any]:
    """:func:`run_in_order` (``ordered=False``, for independent reads: :func:`run_batched`); when a script of ``scripts`` is missing on a master (``NOSCRIPT``), load them
    all and run the batch once more. So every item of a batch with scripts must be idempotent: the
    service's are (reads; ``ZREM``; ``ZADD NX``; an ``HSET`` of a fresh random reference; ledger scripts,
    idempotent per release / reservation id, which return the first result again)."""
    run = run_in_order if ordered else run_batched
    try:
        return run(client, items)
    except redis.exceptions.NoScriptError:
        for script in scripts:
            client.script_load(script.script)
        return run(client, items)


def load_scripts(client: Any, scripts: Sequence[Any]) -> None:
    """``SCRIPT LOAD`` every script (redis-py ``Script``) into Redis -- on a cluster, every master -- so that
    the first ``EVALSHA`` of each is not refused with ``NOSCRIPT`` (and sent twice). One round trip on a
    single Redis. Idempotent; a worker calls it when it starts."""
    if not scripts:
        return
    if is_cluster(client):
        for script in scripts:
            client.script_load(script.script)
        return
    pipe = client.pipeline(transaction=False)
    for script in scripts:
        pipe.script_load(script.script)
    pipe.execute()


class Pending:
    """The result of a read queued on a :class:`RideAlong`: ``done`` once the round trip carrying it returned."""

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None


@dataclass
class RideAlong:
    """Commands that travel in the same round trip as the worker's next Redis step.

    ``before``: writes already due (e.g. marking the previous release published), sent *ahead* of the
    step, in order (:func:`run_in_order`): on one Redis they run before it on the same connection, one
    round trip; on a cluster one pipeline per run of consecutive items on one master, the runs one after
    the other. Reads queued with :meth:`read` are independent of the step and sent *after* it (on a
    cluster, grouped per master); each one's parsed result lands in its :class:`Pending`. ``on_sent``: callbacks run
    once the round trip carrying ``before`` returned without error (e.g. the crash point after a mark).
    ``scripts``: the scripts the items run by SHA (:func:`evalsha_item`), loaded again if Redis lacks them.
    Every item (queued, step or read) queues exactly one command.
    """

    before: list[Item] = field(default_factory=list)
    reads: list[tuple[Reads, Pending]] = field(default_factory=list)
    scripts: list[Any] = field(default_factory=list)
    on_sent: list[Callable[[], None]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.before or self.reads)

    def write(self, item: Item, *, script: Any = None, on_sent: Callable[[], None] | None = None) -> None:
        """Queue a write to go ahead of the next step (``script``: the script it runs by SHA, if any)."""
        self.before.append(item)
        if script is not None:
            self.scripts.append(script)
        if on_sent is not None:
            self.on_sent.append(on_sent)

    def read(self, reads: Reads) -> Pending:
        """Queue ``reads`` to go after the next step; its result is in the returned :class:`Pending`."""
        pending = Pending()
        self.reads.append((reads, pending))
        return pending

    def run(self, client: Any, step: Sequence[Item] = (), scripts: Sequence[Any] = ()) -> list[Any]:
        """Send ``before``, then the ``step`` items, then the queued reads in one batch; return the step's
        replies. The queued writes are then done: the queue is emptied and ``on_sent`` run."""
        before, reads = list(self.before), list(self.reads)
        read_items = [item for r, _ in reads for item in r.items]
        all_scripts = [*self.scripts, *scripts, *(sc for r, _ in reads for sc in r.scripts)]
        if is_cluster(client):  # ordered runs for the writes and the step, the reads grouped per master
            replies = run_with_scripts(client, before + list(step), all_scripts)
            replies += run_with_scripts(client, read_items, all_scripts, ordered=False) if read_items else []
        else:
            replies = run_with_scripts(client, before + list(step) + read_items, all_scripts)
        pos = len(before) + len(step)
        step_replies = replies[len(before):pos]
        for r, pending in reads:
            pending.value, pending.done = r.parse(replies[pos:pos + len(r.items)]), True
            pos += len(r.items)
        self.before, self.reads, self.scripts = [], [], []
        callbacks, self.on_sent = self.on_sent, []
        for callback in callbacks:
            callback()
        return step_replies

    def flush(self, client: Any) -> None:
        """Send what is queued on its own (nothing when the queue is empty)."""
        if self:
            self.run(client)


@dataclass(frozen=True)
class ReadStep:
    """A store's read, one API for both ways to send it: :meth:`now` runs it (in round trips of its own),
    :meth:`later` queues it on a :class:`RideAlong` to go after the ride's next step -- only when it is one
    batch of commands (``batch``; e.g. not a sharded window's merge, read in rounds): else None, and the
    caller runs it :meth:`now` when it needs the data."""

    run: Callable[[], Any]
    batch: Reads | None = None

    def now(self) -> Any:
        return self.run()

    def later(self, ride: RideAlong) -> Pending | None:
        return None if self.batch is None else ride.read(self.batch)

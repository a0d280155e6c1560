"""Which Redis errors the ingest loop retries: the replies of a failover or a resharding, as redis-py
raises them (it maps CLUSTERDOWN, READONLY, TRYAGAIN… to classes and strips the prefix from the message)."""

from __future__ import annotations

import pytest
from redis._parsers.base import BaseParser

from stream_dp.ingest.applier import redis_transient
from stream_dp.node_batches import SlotMoved
from stream_dp.replication import NotReplicated


@pytest.mark.parametrize("reply", [
    "CLUSTERDOWN The cluster is down",
    "READONLY You can't write against a read only replica.",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "LOADING Redis is loading the dataset in memory",
    "NOSCRIPT No matching script. Please use EVAL.",
    "MOVED 3999 127.0.0.1:6381",
    "ASK 3999 127.0.0.1:6381",
])
def test_failover_replies_are_transient(reply):
    assert redis_transient(BaseParser.parse_error(reply))


@pytest.mark.parametrize("reply", ["ERR wrong number of arguments for 'hset' command",
                                   "WRONGTYPE Operation against a key holding the wrong kind of value"])
def test_other_replies_are_not(reply):
    assert not redis_transient(BaseParser.parse_error(reply))


def test_unconfirmed_and_moved_batches_are_transient():
    assert redis_transient(NotReplicated("not confirmed"))
    assert redis_transient(SlotMoved("moved"))

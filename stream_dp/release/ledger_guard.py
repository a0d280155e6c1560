"""The release worker publishes only while Redis still holds the ledger the releases topic was published from.

A wiped ledger (Redis restarted without its AOF, ``FLUSHALL``, a failover to an empty replica) would start
every budget period again at zero while the releases already published stay public: each user's budget
silently doubled. The topic is the ground truth (each record carries its DP events and its scope), so:

- **at start** (:func:`start_check`) the worker reads the last records of each partition of the releases
  topic and checks that the ledger holds each one's charge, and reads the ledger epoch
  (:mod:`stream_dp.state_epochs`). The rule:

  ======================================  =========================  =======================================
  releases topic                          ledger epoch in Redis      decision
  ======================================  =========================  =======================================
  never written (every end offset 0)      any                        start (a new deployment writes one)
  its last records' charges all present   any                        start (written if missing: an upgrade)
  a last record's charge missing          any                        refuse: state lost
  written, but retention deleted all      present                    start
  written, but retention deleted all      missing                    refuse: cannot tell (see the docs)
  ======================================  =========================  =======================================

  Several release workers agree: the epoch is written with ``SET NX``, and a record is published only
  after its charge is committed, so a record another worker published is never seen without its charge.
- **while running** (:class:`LedgerGuard`) the epoch is read again in every poll of the worker and right
  behind every commit (in the commit's round trip; the publication checks that read): a worker that finds
  it gone or changed stops (exit 2) before publishing anything computed on the wiped state.

The refusal (:class:`~stream_dp.state_epochs.StateLost`) names ``stream-dp budget rebuild --from-topic``,
which restores every scope's spent budget from the published records and writes a new epoch.
"""

from __future__ import annotations

import logging
from typing import Any

from stream_dp.keys import Keys
from stream_dp.node_batches import Reads
from stream_dp.state_epochs import Epoch, EpochMarker, StateLost

log = logging.getLogger(__name__)

REBUILD = "stream-dp budget rebuild --from-topic"
REBUILDING = "rebuild from the releases topic in progress"  # the epoch's origin while a rebuild runs
TAIL_MESSAGES = 20  # messages read from the end of each partition of the releases topic at start
CAUSES = "Redis restarted without its AOF, a FLUSHALL, or a failover to a replica that did not have it"


def lost(what: str) -> StateLost:
    """The refusal: what was found, why it matters, what to run."""
    return StateLost(f"Redis lost the budget ledger: {what} ({CAUSES}). The budget already spent by published "
                     f"releases would be forgotten, so no release is published until `{REBUILD}` has restored "
                     "each scope's spent budget from the releases topic (docs/privacy.md §4c)", recovery=REBUILD)


def start_check(client: Any, keys: Keys, contents: Any) -> Epoch:
    """The ledger epoch this worker publishes under, after comparing Redis with ``contents`` (the last
    records of the releases topic, :func:`~stream_dp.release.topic_reader.read_releases`); raises
    :class:`~stream_dp.state_epochs.StateLost` by the rule of the module docstring."""
    marker = EpochMarker(client, keys.ledger_epoch())
    epoch = marker.read()
    if epoch is not None and epoch.origin == REBUILDING:
        raise lost("a rebuild from the releases topic started and has not finished")
    if not contents.ever_written:
        return epoch or marker.create("first start: the releases topic is empty")
    records = contents.records
    if records:
        pipe = client.pipeline(transaction=False)
        for pub in records:
            pipe.hexists(keys.ledger(pub.scope, "charges"), pub.release_id)
        missing = [pub for pub, held in zip(records, pipe.execute()) if not held]
        if missing:
            more = f" and {len(missing) - 1} more of its last {len(records)} records" if len(missing) > 1 else ""
            first = missing[-1]
            raise lost(f"release {first.release_id} (scope {first.scope}) is on the releases topic "
                       f"{contents.topic} but its charge is not in the ledger{more}")
    elif epoch is None:
        raise lost(f"Redis holds no ledger epoch, and the releases topic {contents.topic} has held records "
                   f"(end offsets {contents.ends}) that retention has deleted since, so which budget they spent "
                   "cannot be checked")
    if epoch is None:  # the ledger holds what the topic shows: a deployment older than the epoch
        epoch = marker.create("adopted: the ledger holds the releases topic's last records")
        log.info("ledger epoch %s written (the ledger holds the releases topic's last records)", epoch.id)
    return epoch


class LedgerGuard:
    """Checks, in every poll and behind every commit, that Redis still holds the ledger epoch this worker
    started under (:func:`start_check`); raises :class:`~stream_dp.state_epochs.StateLost` otherwise."""

    def __init__(self, client: Any, keys: Keys, epoch: Epoch) -> None:
        self.marker = EpochMarker(client, keys.ledger_epoch())
        self.epoch = epoch

    def reads(self) -> Reads:
        """The epoch's ``GET``, to batch with other reads; parses to None or raises (:meth:`verdict`)."""
        marker = self.marker.reads()
        return Reads(marker.items, lambda replies: self.verdict(marker.parse(replies)))

    def check(self) -> None:
        """Read the epoch and raise if it is gone or another (one round trip)."""
        self.verdict(self.marker.read())

    def verdict(self, seen: Epoch | None) -> None:
        if seen is None:
            raise lost(f"the ledger epoch {self.epoch.id} this worker started under is gone from Redis")
        if seen.id != self.epoch.id:
            raise StateLost(f"the ledger was replaced while this worker ran (epoch {self.epoch.id} -> {seen.id}, "
                            f"{seen.origin}); restart the release worker", recovery="a restart of the worker")

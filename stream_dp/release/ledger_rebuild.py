"""``stream-dp budget rebuild --from-topic``: the ledger written back from the releases topic after Redis lost it.

Every published record carries what it cost (``cost.events``), the scope it was charged to and the budget
block it was published with (``budget``: spent, remaining and the scope's cap). After Redis lost the ledger
(restarted without its AOF, ``FLUSHALL``, a failover to an empty replica), those records are all that is
left of the budget already spent -- and all that matters: what was published is what users lost.

**A scope on the topic becomes exactly what was published in it.** Its keys are deleted, then each distinct
release id of the scope, in window order, is written back by one ``restore`` script (``lua/restore.lua``):
its charge (log entry ``restore``, the totals), the stored record (so a window the worker revisits
publishes the stored record, never fresh noise), the scope's cap (the ``epsilon_cap`` / ``delta_cap`` the
records state, with ``budget.delta_prime`` from the config, which records do not carry), and a first result
holding the published budget block (a republication is byte-identical). No cap check: a published
release's cost was spent. Whatever else Redis held for such a scope was never published -- a release a
worker computed on the wiped state before it noticed, an open hold -- and is dropped: keeping it would
count spend that nobody saw, or worse, leave a never-published record under a published release id (the
worker would then publish a second, different record for it). A scope that is not on the topic is left
as it is (a new period, or one whose records retention deleted). With a lifetime cap, each costly release
is added to the ``lifetime`` scope (id ``<scope>/<release id>``) unless it is there: the lifetime scope is
never rewritten, since it also counts periods the topic no longer holds (over-counting is the safe side).

The ledger epoch (:mod:`stream_dp.state_epochs`) reads "rebuild in progress" from the first write on, so no
release worker starts on a half-rebuilt ledger; a new epoch is written last. Running it again is harmless.
What cannot be restored is stated, not guessed: charges of releases retention deleted from the topic.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from stream_dp.accounting import ledger_args
from stream_dp.accounting.budget import LIFETIME_SCOPE, BudgetCap
from stream_dp.accounting.events import event_from_dict
from stream_dp.accounting.ledger import SCOPE_PARTS, Ledger, script_text
from stream_dp.accounting.ledger_log import Cost
from stream_dp.accounting.period_caps import protocol_cap
from stream_dp.release.ledger_guard import REBUILDING
from stream_dp.release.records import Envelope
from stream_dp.state_epochs import Epoch, EpochMarker


@dataclass
class RebuildReport:
    """What a rebuild did: releases read, charges written per scope, charges it replaced, the new epoch."""

    releases: int = 0
    restored: dict[str, int] = field(default_factory=dict)
    replaced: int = 0
    lifetime: int = 0
    epoch: Epoch | None = None

    def summary(self) -> str:
        scopes = ", ".join(f"{scope}: {n}" for scope, n in sorted(self.restored.items())) or "none"
        return (f"{self.releases} releases on the topic; restored {sum(self.restored.values())} charges "
                f"({scopes}) in place of the {self.replaced} charges the ledger held for those scopes"
                + (f", {self.lifetime} added to the lifetime scope" if self.lifetime else "")
                + (f"; new ledger epoch {self.epoch.id}" if self.epoch else ""))


def first_records(records: list[Any]) -> list[dict[str, Any]]:
    """Each release id's first record on the topic (republications are identical), in window order."""
    seen: dict[str, tuple[int, int, int, dict[str, Any]]] = {}
    for pub in records:
        seen.setdefault(pub.release_id, (int(pub.record["window"]["start"]), pub.partition, pub.offset, pub.record))
    return [entry[3] for entry in sorted(seen.values(), key=lambda e: e[:3])]


def scope_cap(block: dict[str, Any], configured: BudgetCap) -> BudgetCap:
    """The cap a scope's records state (δ′ from the config: records do not carry it); the configured cap when
    the records predate caps in the budget block."""
    if "epsilon_cap" not in block or "delta_cap" not in block:
        return configured
    return BudgetCap(float(block["epsilon_cap"]), float(block["delta_cap"]), configured.delta_prime)


def stored_record(record: dict[str, Any]) -> str:
    """The outbox payload of a published record: its envelope, the record without the ledger's budget block
    and without private state (an alerts record's staged state is gone; the worker closes its instance)."""
    return Envelope({k: v for k, v in record.items() if k != "budget"}).dumps()


def rebuild(ledger: Ledger, records: list[Any]) -> RebuildReport:
    """Rewrite every scope of ``records`` (:class:`~stream_dp.release.topic_reader.Published`) in ``ledger``
    from its published releases (its configured caps give δ′ and the lifetime cap); the epoch says "rebuild in
    progress" until :func:`finish`."""
    marker = EpochMarker(ledger.redis, ledger.keys.ledger_epoch())
    marker.replace(REBUILDING)
    script = ledger.redis.register_script(script_text("restore"))
    report = RebuildReport()
    by_scope: dict[str, list[dict[str, Any]]] = {}
    for record in first_records(records):
        by_scope.setdefault(str(record["budget"]["scope"]), []).append(record)
    for scope, scope_records in by_scope.items():
        keys = [ledger.keys.ledger(scope, part) for part in SCOPE_PARTS]
        report.replaced += int(ledger.redis.hlen(ledger.keys.ledger(scope, "charges")))
        ledger.redis.delete(*keys)
        ledger.index_ahead(scope)
        for record in scope_records:
            report.releases += 1
            rid, block = str(record["release_id"]), dict(record["budget"])
            events = [event_from_dict(e) for e in record["cost"]["events"]]
            events_json = json.dumps([e.to_dict() for e in events], separators=(",", ":"))
            cost = Cost.of(events).fields()
            args = ledger_args.encode("restore", cap=protocol_cap(scope_cap(block, ledger.cap), ledger.lifetime_cap),
                                      payload=stored_record(record), release_id=rid, cost=cost, events=events_json,
                                      now=time.time(), block=json.dumps(block, sort_keys=True, separators=(",", ":")))
            report.restored[scope] = report.restored.get(scope, 0) + int(script(keys=keys, args=args))
            if ledger.lifetime_cap is not None and events:
                ledger.index_ahead(LIFETIME_SCOPE)
                life = ledger_args.encode("restore", cap=protocol_cap(ledger.lifetime_cap), release_id=f"{scope}/{rid}",
                                          cost=cost, events=events_json, now=time.time())
                report.lifetime += int(script(keys=[ledger.keys.ledger(LIFETIME_SCOPE, part) for part in SCOPE_PARTS],
                                              args=life))
    return report


def finish(ledger: Ledger) -> Epoch:
    """The rebuild's last step, once the ledger and the release bookkeeping are restored: a new ledger epoch
    (release workers start again)."""
    return EpochMarker(ledger.redis, ledger.keys.ledger_epoch()).replace("rebuilt from the releases topic")

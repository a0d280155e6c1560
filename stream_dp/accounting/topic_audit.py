"""``stream-dp budget verify --against-topic``: the ledger against the releases topic, both ways.

The releases topic is the ground truth of what was spent: a published record is visible for good, and it
carries its own DP events (``cost.events``) and its budget scope (``budget.scope``). So:

1. **every published record's charge is in the ledger** -- its release id is charged in its scope, with the
   cost of the events the record carries (and, with a lifetime cap, held or charged in the lifetime scope
   when it cost anything); a record missing from the ledger is privacy spent that the ledger forgot (a
   Redis that lost state, a failover to a replica without it);
2. **every committed charge of a published release is on the topic** -- a release the ledger stored and
   marked published must be there; one that is not was charged without being seen (harmless to privacy,
   but a sign that the ledger and the topic belong to different deployments or that records were deleted).

Retention deletes old records from the topic legitimately (Apache Kafka's default: 7 days). A partition
whose first offset still held is above 0 lost its oldest records; a charge whose window starts before the
earliest window still held in such a partition (the latest of those, over the trimmed partitions, so no
partition's deleted records are taken for missing ones) is counted as *before retention*, not as a problem.
Records are published in window order (windows are released oldest first), which is what makes that rule
sound. A charge stored but not yet published (``unpublished``) is *pending*: the release worker publishes it
when it next starts. The comparison is a pure function of what was read (:func:`audit`); reading is
:func:`ledger_view` (Redis) and :func:`stream_dp.release.topic_reader.read_releases` (Kafka).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from stream_dp.accounting.budget import LIFETIME_SCOPE
from stream_dp.accounting.events import event_from_dict
from stream_dp.accounting.ledger_log import CHARGE_TYPES, Cost, decode, history_entry


@dataclass
class ScopeView:
    """What the ledger holds for one scope: each charged id's cost (from the log), the ids with a first
    result (the idempotency record a repeated charge returns), the ids stored with a record, those not yet
    published, and open holds."""

    charges: dict[str, Cost] = field(default_factory=dict)
    first_results: set[str] = field(default_factory=set)
    stored: set[str] = field(default_factory=set)
    unpublished: set[str] = field(default_factory=set)
    holds: set[str] = field(default_factory=set)


@dataclass
class AuditReport:
    """The outcome: how much was checked each way and every problem found (none: the two agree)."""

    topic: str
    messages: int = 0
    records_checked: int = 0
    charges_checked: int = 0
    pending: int = 0
    before_retention: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: ``releases topic T: 240 records checked against the ledger, 240 charges checked against
        the topic (0 pending, 0 before retention); 0 problems``."""
        return (f"releases topic {self.topic}: {self.records_checked} records checked against the ledger, "
                f"{self.charges_checked} charges checked against the topic ({self.pending} pending publication, "
                f"{self.before_retention} before the topic's retention); {len(self.problems)} problem"
                + ("" if len(self.problems) == 1 else "s"))

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "messages": self.messages, "records_checked": self.records_checked,
                "charges_checked": self.charges_checked, "pending": self.pending,
                "before_retention": self.before_retention, "problems": list(self.problems), "ok": self.ok}


def ledger_view(ledger: Any, scopes: Iterable[str]) -> dict[str, ScopeView]:
    """Read what :func:`audit` compares, per scope, from a :class:`~stream_dp.accounting.ledger.Ledger` (one
    consistent snapshot per scope)."""
    out: dict[str, ScopeView] = {}
    for scope in scopes:
        keys = ledger.keys
        pipe = ledger.redis.pipeline(transaction=True)
        pipe.xrange(keys.ledger(scope, "log"))
        pipe.hkeys(keys.ledger(scope, "outbox"))
        pipe.zrange(keys.ledger(scope, "unpublished"), 0, -1)
        pipe.hkeys(keys.ledger(scope, "reservations"))
        pipe.hkeys(keys.ledger(scope, "charges"))
        log, stored, unpublished, holds, first = pipe.execute()
        view = ScopeView(stored={decode(r) for r in stored}, unpublished={decode(r) for r in unpublished},
                         holds={decode(h) for h in holds}, first_results={decode(r) for r in first})
        for entry_id, fields in log:
            entry = history_entry(entry_id, fields)
            if entry.type in CHARGE_TYPES:
                view.charges.setdefault(entry.id, entry.cost)
        out[scope] = view
    return out


def _window_start(release_id: str) -> int | None:
    label = release_id.split(".", 1)[0]
    try:
        return int(label.split("-", 1)[0])
    except ValueError:
        return None


def retention_horizon(records: Iterable[Any], starts: dict[int, int]) -> float:
    """The window start before which a missing record may have been deleted by retention: over the
    partitions whose first offset still held is above 0, the latest of their earliest windows still held
    (+inf for a trimmed partition that holds nothing any more); -inf when nothing was deleted."""
    trimmed = {p for p, start in starts.items() if start > 0}
    if not trimmed:
        return float("-inf")
    earliest: dict[int, int] = {}
    for pub in records:
        if pub.partition in trimmed:
            w = int(pub.record["window"]["start"])
            earliest[pub.partition] = min(w, earliest.get(pub.partition, w))
    return max(float(earliest[p]) if p in earliest else float("inf") for p in trimmed)


def audit(contents: Any, view: dict[str, ScopeView], *, lifetime: bool = False) -> AuditReport:
    """Compare the topic's records (:class:`~stream_dp.release.topic_reader.TopicContents`) with the ledger
    (``view``, per scope; ``lifetime``: a lifetime cap is configured, so costly releases must be counted in
    the ``lifetime`` scope too)."""
    report = AuditReport(contents.topic, messages=len(contents.records))
    report.problems.extend(f"message {where} is not a release record" for where in contents.invalid)
    first: dict[str, dict[str, Any]] = {}
    for pub in contents.records:
        if first.setdefault(pub.release_id, pub.record) != pub.record:
            report.problems.append(f"release {pub.release_id} is on the topic twice with different contents")
    life = view.get(LIFETIME_SCOPE, ScopeView())
    for rid, record in first.items():
        report.records_checked += 1
        scope = str(record["budget"]["scope"])
        scope_view = view.get(scope, ScopeView())
        charged = scope_view.charges.get(rid)
        if charged is None or rid not in scope_view.first_results:
            missing = "charge" if charged is None and rid not in scope_view.first_results else \
                "charge's log entry" if charged is None else "charge's first result"
            report.problems.append(f"release {rid} (scope {scope}) is on the topic but its {missing} is not in "
                                   "the ledger")
            continue
        events = [event_from_dict(e) for e in record["cost"]["events"]]
        if Cost.of(events) != charged:
            report.problems.append(f"release {rid} (scope {scope}): the ledger charged {charged}, the record on "
                                   f"the topic costs {Cost.of(events)}")
        hold = f"{scope}/{rid}"
        if lifetime and events and hold not in life.charges and hold not in life.holds:
            report.problems.append(f"release {rid} (scope {scope}) is not counted in the lifetime scope")
    horizon = retention_horizon(contents.records, contents.starts)
    for scope, scope_view in sorted(view.items()):
        if scope == LIFETIME_SCOPE:
            continue
        for rid in sorted(scope_view.stored & set(scope_view.charges)):
            if rid in scope_view.unpublished:
                report.pending += 1
                continue
            report.charges_checked += 1
            if rid in first:
                continue
            start = _window_start(rid)
            if start is not None and start < horizon:
                report.before_retention += 1
                continue
            report.problems.append(f"release {rid} (scope {scope}) is charged and marked published in the "
                                   "ledger but not on the topic")
    return report

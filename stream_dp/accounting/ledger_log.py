"""A ledger scope's event log and what is recomputed from it: costs, log entries, and ``verify``.

Every ledger operation (:mod:`stream_dp.accounting.ledger`) appends one entry -- charge, reserve, settle or
cancel, with its DP events and cost -- to the scope's append-only stream. :func:`check_scope` recomputes the
committed totals, the charged release ids and the open reservations from that log, with the same float
additions the Lua scripts made (so a consistent ledger matches exactly), re-derives each entry's cost from
its logged events, and checks the recomputed spend against the scope's stored cap
(:func:`~stream_dp.accounting.period_caps.overspend_problems`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.composition import Spent, compose
from stream_dp.accounting.events import DpEvent, event_from_dict
from stream_dp.accounting.period_caps import overspend_problems

COST_FIELDS = ("rho", "zd", "beps", "bd", "binf")
#: Log entries that commit a cost: a charge, a settled reservation, a published charge restored from the topic.
CHARGE_TYPES = ("charge", "settle", "restore")


@dataclass(frozen=True)
class Cost:
    """The numbers one operation adds to a scope: composed (ρ, δ) and basic (Σε, Σδ) of its events."""

    rho: float = 0.0
    zd: float = 0.0
    beps: float = 0.0  # finite part; ``binf`` > 0 means basic ε is infinite (a zCDP event was involved)
    bd: float = 0.0
    binf: int = 0

    @classmethod
    def of(cls, events: Sequence[DpEvent]) -> "Cost":
        s = compose(events)
        if s.basic_epsilon == float("inf"):
            return cls(s.rho, s.zcdp_delta, 0.0, s.basic_delta, 1)
        return cls(s.rho, s.zcdp_delta, s.basic_epsilon, s.basic_delta, 0)

    @classmethod
    def from_fields(cls, data: dict[str, Any]) -> "Cost":
        return cls(float(data["rho"]), float(data["zd"]), float(data["beps"]), float(data["bd"]),
                   int(data["binf"]))

    @classmethod
    def from_string(cls, value: str) -> "Cost":
        """An open hold as the scripts store it: ``"rho zd beps bd binf"``."""
        rho, zd, beps, bd, binf = value.split()
        return cls(float(rho), float(zd), float(beps), float(bd), int(binf))

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.rho + other.rho, self.zd + other.zd, self.beps + other.beps, self.bd + other.bd,
                    self.binf + other.binf)

    def spent(self) -> Spent:
        return Spent(self.rho, self.zd, float("inf") if self.binf else self.beps, self.bd)

    def fields(self) -> dict[str, float | int]:
        """The named cost fields of the ledger protocol (:data:`stream_dp.accounting.ledger_args.COST_FIELDS`)."""
        return {"rho": self.rho, "zd": self.zd, "beps": self.beps, "bd": self.bd, "binf": self.binf}


@dataclass(frozen=True)
class VerifyReport:
    """verify(): totals recomputed from the event log against the stored totals (and the stored cap)."""

    scope: str
    ok: bool
    problems: tuple[str, ...]
    from_log: Spent
    stored: Spent
    charges: int
    open_reservations: int
    cap: BudgetCap | None = None  # the scope's stored cap (None: never charged, or before caps were stored)

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class HistoryEntry:
    """One entry of a scope's event log."""

    entry_id: str
    type: str  # charge | reserve | settle | cancel | restore (a published charge written back from the topic)
    id: str  # release id (charge, settle) or reservation id (reserve, cancel)
    reservation: str
    cost: Cost
    events: tuple[DpEvent, ...]
    time: float
    extra: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        spent = self.cost.spent()
        return {"entry_id": self.entry_id, "type": self.type, "id": self.id, "reservation": self.reservation,
                "rho": spent.rho, "delta": spent.zcdp_delta, "basic_epsilon": finite_or_none(spent.basic_epsilon),
                "events": [e.to_dict() for e in self.events], "time": self.time}


def finite_or_none(value: float) -> float | None:
    """JSON has no infinity: an unavailable basic-composition ε (zCDP events) is reported as null."""
    return value if math.isfinite(value) else None


def as_dict(value: Any) -> dict[Any, Any]:
    """A hash / stream-entry reply as a dict (cluster transactions return some replies unparsed, as flat lists)."""
    if isinstance(value, dict):
        return value
    return dict(zip(value[::2], value[1::2]))


def decode(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def history_entry(entry_id: Any, fields: Any) -> HistoryEntry:
    """One log entry (an ``XRANGE`` item) as a :class:`HistoryEntry`."""
    f = {decode(k): decode(v) for k, v in as_dict(fields).items()}
    events = tuple(event_from_dict(d) for d in json.loads(f.get("events", "[]")))
    return HistoryEntry(entry_id=decode(entry_id), type=f["type"], id=f["id"], reservation=f.get("reservation", ""),
                        cost=Cost.from_fields(f), events=events, time=float(f.get("time", "0")))


def stored_totals(totals: dict[Any, Any]) -> Cost:
    """The committed totals of a scope's ``totals`` hash (0 for a field not written yet)."""
    return Cost.from_fields({k: decode(totals.get(k.encode(), b"0")) for k in COST_FIELDS})


def check_scope(scope: str, log: Iterable[tuple[Any, Any]], totals: Any, charged: Iterable[Any],
                holds: Iterable[Any], outbox: Iterable[Any], unpublished: Iterable[Any],
                cap: BudgetCap | None) -> VerifyReport:
    """:meth:`Ledger.verify <stream_dp.accounting.ledger.Ledger.verify>` on one consistent snapshot of a scope:
    its log (``XRANGE`` items), ``totals`` hash, the ids of its first results (``charged``), open holds,
    stored releases (``outbox``), ``unpublished`` ids and stored ``cap``."""
    totals = as_dict(totals)
    problems: list[str] = []
    total = Cost()
    open_holds: set[str] = set()
    charged_in_log: list[str] = []
    for entry_id, fields in log:
        entry = history_entry(entry_id, fields)
        if entry.type in ("charge", "settle", "reserve", "restore") and Cost.of(entry.events) != entry.cost:
            problems.append(f"log entry {entry.entry_id}: logged cost differs from its DP events")
        if entry.type in CHARGE_TYPES:
            total = total + entry.cost
            charged_in_log.append(entry.id)
        if entry.type == "reserve":
            open_holds.add(entry.id)
        elif entry.type in ("settle", "cancel") and entry.reservation:
            open_holds.discard(entry.reservation)
    stored = stored_totals(totals)
    if stored != total:
        problems.append(f"stored totals {stored} differ from the log's {total}")
    if len(charged_in_log) != len(set(charged_in_log)):
        problems.append("a release id was charged more than once in the log")
    if set(charged_in_log) != {decode(c) for c in charged}:
        problems.append("release ids in the log differ from the recorded first results")
    if int(decode(totals.get(b"n", b"0"))) != len(charged_in_log):
        problems.append("stored charge count differs from the log")
    if open_holds != {decode(h) for h in holds}:
        problems.append("open reservations differ from the log's reserve/settle/cancel entries")
    stored_ids = {decode(r) for r in outbox}
    if not stored_ids <= set(charged_in_log):
        problems.append("a stored release has no charge in the log")  # the invariant that matters most
    if not {decode(r) for r in unpublished} <= stored_ids:
        problems.append("an unpublished release id has no stored payload")
    problems.extend(overspend_problems(total.spent(), cap, scope))
    return VerifyReport(scope, not problems, tuple(problems), total.spent(), stored.spent(),
                        len(charged_in_log), len(open_holds), cap)

"""Release records: ids, the JSON record, and the outbox envelope around it.

A record (schema ``config/release.schema.json``, ``schema_version`` 1) is what subscribers read: the window,
the release type, the mechanism and its public parameters, the released items, the stopped-at-⊥ flag, the
privacy cost of this release (its DP events, so every release carries its own audit trail) and the budget
of the period after it was charged. ``created_at`` is the window's end (public), not a wall-clock time.

The outbox stores an **envelope** ``{"record": ..., "state": ...}`` in the ledger atomically with the charge:
``record`` lacks only the ``budget`` block, which is filled from the ledger's (first, idempotent) charge result
when the record is published -- so the budget shown is exactly what the ledger's atomic step computed;
``state`` is release-worker bookkeeping that must change together with the release (for alerts: only the
random reference of the staged sparse-vector state, never the state itself). ``state`` never leaves Redis.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import DpEvent, event_from_dict
from stream_dp.config import RELEASE_TYPES
from stream_dp.release.windows import Window
from stream_dp.wire import encode

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "config" / "release.schema.json"
PACKAGED_SCHEMA_PATH = Path(__file__).resolve().parents[1] / "defaults" / "release.schema.json"  # wheel copy
STATUS_RELEASED = "released"
STATUS_BUDGET_EXHAUSTED = "budget_exhausted"


def release_id(window: Window, release_type: str) -> str:
    """``"<start>-<end>.<type>"``: one id per (window, type); the Kafka key and the ledger's idempotency key.

    >>> release_id(Window(3600, 7200), "topk")
    '3600-7200.topk'
    """
    if release_type not in RELEASE_TYPES:
        raise ValueError(f"unknown release type {release_type!r}; known: {', '.join(RELEASE_TYPES)}")
    return f"{window.label}.{release_type}"


def parse_release_id(rid: str) -> tuple[Window, str]:
    """Inverse of :func:`release_id`.

    >>> parse_release_id("3600-7200.alerts")
    (Window(start=3600, end=7200), 'alerts')
    """
    label, _, rtype = rid.partition(".")
    start, _, end = label.partition("-")
    try:
        return Window(int(start), int(end)), rtype
    except ValueError:
        raise ValueError(f"malformed release id {rid!r}; expected <start>-<end>.<type>") from None


def cost_block(events: Sequence[DpEvent]) -> dict[str, Any]:
    """The ``cost`` of one release: its events, basic-composition ε and δ, and zCDP ρ.

    ``epsilon`` is None (JSON ``null``) when basic composition gives no finite ε -- a zCDP-only release
    (``histogram``): its guarantee is ρ with δ, and the ledger converts the period's total (docs/privacy.md §3).
    An infinite float has no JSON form: written as ``Infinity`` it made every such record unreadable to a
    strict JSON parser (browsers, Go, Java, jq) and the dashboard's ``/api/releases`` fail."""
    spent = compose(events)
    return {
        "events": [e.to_dict() for e in events],
        "epsilon": _finite_or_none(spent.basic_epsilon) if events else 0.0,
        "delta": spent.basic_delta if events else 0.0,
        "rho": spent.rho,
    }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def events_of(record: Mapping[str, Any]) -> list[DpEvent]:
    """The DP events a record says it cost."""
    return [event_from_dict(e) for e in record["cost"]["events"]]


def scheduled_at_iso(window: Window) -> str:
    """The record's ``created_at``: the window's end, UTC ISO 8601 -- the time the public schedule makes the
    window due, not the wall time of the computation (which grows with the window's size, a private
    quantity; docs/privacy.md §1b).

    >>> scheduled_at_iso(Window(0, 3600))
    '1970-01-01T01:00:00Z'
    """
    return datetime.fromtimestamp(window.end, timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class Envelope:
    """What the outbox stores under a release id: the record (without ``budget``) and private state."""

    record: dict[str, Any]
    state: dict[str, Any] | None = None

    def dumps(self) -> str:
        return json.dumps({"record": self.record, "state": self.state}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, payload: str | bytes) -> "Envelope":
        data = json.loads(payload)
        return cls(data["record"], data.get("state"))


@dataclass
class RecordDraft:
    """A release before it is charged: everything but the ledger's budget block."""

    window: Window
    type: str
    mechanism: str
    parameters: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)
    hit_bottom: bool | None = None
    events: tuple[DpEvent, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)
    status: str = STATUS_RELEASED
    domain: dict[str, Any] | None = None  # the public domain used (stream_dp.release.public_domain.domain_block)

    @property
    def release_id(self) -> str:
        return release_id(self.window, self.type)

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "release_id": self.release_id,
            "schema_version": SCHEMA_VERSION,
            "window": {"start": self.window.start, "end": self.window.end},
            "type": self.type,
            "status": self.status,
            "mechanism": {"name": self.mechanism, "parameters": dict(self.parameters)},
            "items": list(self.items),
            "hit_bottom": self.hit_bottom,
            "cost": cost_block(self.events),
            "created_at": scheduled_at_iso(self.window),
        }
        if self.info:
            rec["info"] = dict(self.info)
        if self.domain is not None:
            rec["domain"] = dict(self.domain)
        return rec


def exhausted_draft(window: Window, release_type: str, mechanism: str, parameters: dict[str, Any],
                    reason: str) -> RecordDraft:
    """The small status record published instead of a release the budget cannot cover (nothing ran)."""
    return RecordDraft(window, release_type, mechanism, parameters, items=[], hit_bottom=None, events=(),
                       info={"reason": reason}, status=STATUS_BUDGET_EXHAUSTED)


def with_budget(record: Mapping[str, Any], budget: Mapping[str, Any]) -> dict[str, Any]:
    """The published record: the stored one plus the ledger's budget block. A record stored before
    :func:`cost_block` wrote ``null`` for an unbounded ε (it stored ``Infinity``) is published with ``null``."""
    out = dict(record)
    cost = out.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("epsilon"), float):
        out["cost"] = {**cost, "epsilon": _finite_or_none(cost["epsilon"])}
    out["budget"] = dict(budget)
    return out


def load_schema() -> dict[str, Any]:
    path = SCHEMA_PATH if SCHEMA_PATH.exists() else PACKAGED_SCHEMA_PATH
    return json.loads(path.read_text())


def validate_record(record: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` if ``record`` does not follow the release schema, ``ValueError`` if it
    holds a number strict JSON cannot carry (NaN, ±Infinity: :func:`encode` refuses it) (tests, tools)."""
    import jsonschema  # test/tool dependency only

    encode(record)

    jsonschema.Draft202012Validator(load_schema(), format_checker=jsonschema.FormatChecker()).validate(record)

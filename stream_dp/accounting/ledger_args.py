"""The ledger scripts' arguments, named: one small versioned encoding shared by Python and Lua.

Every ledger operation (``charge``, ``reserve``, ``settle``, ``cancel``; :mod:`stream_dp.accounting.ledger`)
passes ``ARGV[1]`` = one JSON object that ``lua/common.lua`` decodes with ``cjson`` into ``ARGS``::

    {"v": 2, "op": "charge", "cap": {"epsilon": "1.0", "delta": "1e-05", "delta_prime": "1e-07",
                                     "lifetime_epsilon": "0.0", "lifetime_delta": "0.0"},
     "release_id": "...", "reservation_id": "...",
     "cost": {"rho": "...", "zd": "...", "beps": "...", "bd": "...", "binf": 0},
     "events": "<the events' JSON>", "now": "<unix seconds>"}

and, for ``charge`` and ``settle`` with a release record to store, ``ARGV[2]`` = that payload (kept out of
the JSON: it is stored byte for byte). ``cap`` is the worker's configured cap: a scope that has a stored cap
(:mod:`stream_dp.accounting.period_caps`) is checked against that one instead; a scope's first write stores
``cap`` (with the lifetime fields, optional, kept for the record). Version 2: the cap belongs to the period. Which fields each operation takes is :data:`FIELDS`. Real numbers
travel as ``repr`` strings (shortest round-trip form; Lua's ``tonumber`` is ``strtod``), so every double
arrives exactly; ``binf`` (a count) is a JSON integer. A script refuses any other ``v`` with an error that
names both versions, so a worker and scripts of different versions cannot misread each other.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

VERSION = 2

#: The named fields of each operation (besides ``v``, ``op`` and ``cap``, which every operation has).
FIELDS: Mapping[str, tuple[str, ...]] = {
    "charge": ("release_id", "cost", "events", "now"),
    "reserve": ("reservation_id", "cost", "events", "now"),
    "settle": ("reservation_id", "release_id", "cost", "events", "now"),
    "cancel": ("reservation_id", "now"),
    "restore": ("release_id", "cost", "events", "now"),  # and optionally "block" (stream_dp.accounting.ledger_rebuild)
}
OPTIONAL_FIELDS: Mapping[str, tuple[str, ...]] = {"restore": ("block",)}
COST_FIELDS = ("rho", "zd", "beps", "bd", "binf")
CAP_FIELDS = ("epsilon", "delta", "delta_prime")
OPTIONAL_CAP_FIELDS = ("lifetime_epsilon", "lifetime_delta")


def real(x: float) -> str:
    """A finite double as the string Lua reads back exactly."""
    value = float(x)
    if not math.isfinite(value):
        raise ValueError(f"the ledger protocol carries finite numbers only, got {x!r}")
    return repr(value)


def encode(op: str, *, cap: Mapping[str, float], payload: str | None = None, **fields: Any) -> list[str]:
    """``ARGV`` of operation ``op``: the JSON header, then the payload if there is one.

    ``cap``: ``epsilon``, ``delta``, ``delta_prime`` (and optionally ``lifetime_epsilon``, ``lifetime_delta``);
    ``cost``: the five :data:`COST_FIELDS`; ``now``: a
    number; ids and ``events`` strings. A missing or unknown field is a ``ValueError`` naming it.

    >>> encode("cancel", cap={"epsilon": 1, "delta": 1e-5, "delta_prime": 1e-7}, reservation_id="r", now=5)
    ['{"v":2,"op":"cancel","cap":{"epsilon":"1.0","delta":"1e-05","delta_prime":"1e-07"},"reservation_id":"r","now":"5.0"}']
    """
    try:
        names = FIELDS[op]
    except KeyError:
        raise ValueError(f"unknown ledger operation {op!r}; known: {', '.join(FIELDS)}") from None
    optional = OPTIONAL_FIELDS.get(op, ())
    if not set(names) <= set(fields) <= set(names) | set(optional):
        missing, extra = sorted(set(names) - set(fields)), sorted(set(fields) - set(names) - set(optional))
        raise ValueError(f"ledger operation {op!r}: missing {missing}, unknown {extra}")
    if payload is not None and op not in ("charge", "settle", "restore"):
        raise ValueError(f"ledger operation {op!r} stores no payload")
    header: dict[str, Any] = {"v": VERSION, "op": op,
                              "cap": {k: real(cap[k]) for k in (*CAP_FIELDS, *OPTIONAL_CAP_FIELDS) if k in cap}}
    for name in (*names, *(n for n in optional if n in fields)):
        value = fields[name]
        if name == "cost":
            value = {k: (int(value[k]) if k == "binf" else real(value[k])) for k in COST_FIELDS}
        elif name == "now":
            value = real(value)
        elif not isinstance(value, str):
            raise ValueError(f"ledger operation {op!r}: {name} must be a string, got {type(value).__name__}")
        header[name] = value
    argv = [json.dumps(header, separators=(",", ":"), ensure_ascii=False, allow_nan=False)]
    return argv if payload is None else [*argv, payload]

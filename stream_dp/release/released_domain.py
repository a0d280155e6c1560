"""The released domain: a window's public domain learned from what earlier windows *published*.

A release type that takes a public domain (``histogram``, known-domain ``topk``, the ``alerts`` watchlist) may
add, with ``domain_from_released = true``, the keys that the releases of ``domain_sources`` published in the
last ``domain_memory_windows`` windows of the schedule before the current one (docs/privacy.md §10). Those keys
are public: they are DP outputs already published (and charged), so using them is post-processing, and the
window's domain is a function of published records and the public config only -- never of raw counts, never
of a release not yet published.

**Which keys a record contributes** (:func:`found_keys`; the rule a subscriber can apply to the topic): a
``released`` record's item keys that show the key present, by its type's rule
(:attr:`~stream_dp.release.types.ReleaseType.shows_key`) -- for ``histogram`` only the items whose interval
lies above 0 (``ci_low`` ≥ 1; a tracked key whose noisy count no longer shows that is not re-earned, and
ages out). ``budget_exhausted`` and skipped records publish no key, so they contribute none.

**Which windows** (:func:`memory_windows`): the ``domain_memory_windows`` scheduled windows right before the
current one, never before the schedule's start. The worker releases windows strictly in schedule order (it
claims only the oldest unreleased window, and marks a window released only once every type of it is
published: :mod:`stream_dp.release.worker`), so when window t is computed every earlier window is published.
:class:`ReleasedDomainReader` does not take that on trust: it reads the released marks of the memory windows
and the ledger's unpublished list with the stored records, and raises :class:`DomainNotPublished` (the pass
fails and is retried) if any of them is not released, or any record it would read is stored but unpublished.

**Order and bound** (:func:`learn_domain`): ``recent`` -- by the latest window that published the key, then by
its rank there, then the key; ``frequent`` -- by how many memory windows published it, then as ``recent``.
The first ``domain_max_keys`` keys are kept. Every step is a deterministic function of the records, so every
worker, restart and subscriber computes the same domain; the release records it (``domain`` block: its size,
the windows and types it came from, and a digest of the learned keys, :func:`domain_digest`). How a type
uses its domain in a window (static keys, then the learned ones) is :mod:`stream_dp.release.public_domain`'s.

The records are read from the ledger's outbox (the stored envelope of each release id, whole -- a record
published in parts is stored whole), not from the topic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stream_dp.errors import StreamDPError
from stream_dp.store.keys import Keys
from stream_dp.release.ledger_port import ReleaseLedger
from stream_dp.release.public_domain import DomainRule
from stream_dp.release.records import STATUS_RELEASED, Envelope, release_id
from stream_dp.release.types import REGISTRY
from stream_dp.release.windows import Window


class DomainNotPublished(RuntimeError, StreamDPError):
    """A window's released domain would read a window that is not released, or a record not yet published
    (windows are released in schedule order, so this means a bug or lost state): the pass fails, and is retried."""


def found_keys(record: Mapping[str, Any]) -> list[str]:
    """The keys a published record contributes to a released domain, in its item order (module docstring).

    >>> found_keys({"type": "histogram", "status": "released", "items": [{"key": "a", "ci_low": 3},
    ...             {"key": "b", "ci_low": 0}]})
    ['a']
    >>> found_keys({"type": "topk", "status": "budget_exhausted", "items": []})
    []
    """
    if record.get("status") != STATUS_RELEASED:
        return []
    release_type = REGISTRY.get(str(record.get("type")))
    shows = release_type.shows_key if release_type is not None else None  # the type's rule (histogram: ci_low ≥ 1)
    return [str(i["key"]) for i in record.get("items") or [] if "key" in i and (shows is None or shows(i))]


def memory_windows(start: int, *, size: int, schedule_start: int, memory: int) -> list[int]:
    """Starts of the ``memory`` scheduled windows right before the window starting at ``start``, oldest
    first, none before the schedule's start.

    >>> memory_windows(7200, size=3600, schedule_start=0, memory=4), memory_windows(0, size=3600, schedule_start=0, memory=2)
    ([0, 3600], [])
    """
    first = max(schedule_start, start - memory * size)
    return list(range(first, start, size))


def domain_digest(keys: Iterable[str]) -> str:
    """A short digest of a key list in its order (BLAKE2b-128 of the keys joined by newlines, hex), so a
    subscriber who recomputed a domain can compare it with the one a record states.

    >>> domain_digest([])
    'cae66941d9efbd404e4d88758ea67670'
    """
    return hashlib.blake2b("\n".join(keys).encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class LearnedDomain:
    """The keys a window learned (in domain order) and where they came from."""

    keys: tuple[str, ...]
    rule: DomainRule
    windows: tuple[int, ...]  # the memory windows read, oldest first
    candidates: int  # distinct keys those windows' records contributed (before domain_max_keys)

    def provenance(self) -> dict[str, Any]:
        """The ``domain.from_released`` block of a release record."""
        return {"types": list(self.rule.sources), "memory_windows": self.rule.memory_windows,
                "windows": [self.windows[0], self.windows[-1]] if self.windows else [],
                "order": self.rule.order, "max_keys": self.rule.max_keys, "candidates": self.candidates,
                "keys": len(self.keys), "digest": domain_digest(self.keys)}


def learn_domain(records: Mapping[int, Sequence[Mapping[str, Any]]], rule: DomainRule) -> LearnedDomain:
    """The learned domain from the published records of the memory windows (window start → that window's
    records of the rule's source types, in any order): pure, deterministic (module docstring).

    >>> rule = DomainRule(("topk",), memory_windows=2, max_keys=2, order="recent")
    >>> rec = lambda *keys: {"type": "topk", "status": "released", "items": [{"key": k} for k in keys]}
    >>> learn_domain({0: [rec("a", "b")], 60: [rec("c", "a")]}, rule).keys
    ('c', 'a')
    >>> learn_domain({0: [rec("a", "b")], 60: [rec("c", "b")]}, DomainRule(("topk",), 2, 1, "frequent")).keys
    ('b',)
    """
    latest: dict[str, tuple[int, int]] = {}  # key -> (latest window, best rank there)
    windows_with: dict[str, int] = {}
    for start in sorted(records):
        seen: dict[str, int] = {}
        for record in sorted(records[start], key=lambda r: str(r.get("type"))):
            if record.get("type") not in rule.sources:
                continue
            for rank, key in enumerate(found_keys(record)):
                seen[key] = min(rank, seen.get(key, rank))
        for key, rank in seen.items():
            latest[key] = (start, rank)
            windows_with[key] = windows_with.get(key, 0) + 1

    def recent(key: str) -> tuple:
        window, rank = latest[key]
        return (-window, rank, key)

    order: Callable[[str], tuple] = recent if rule.order == "recent" else (lambda key: (-windows_with[key], *recent(key)))
    ranked = sorted(latest, key=order)
    return LearnedDomain(tuple(ranked[:rule.max_keys]), rule, tuple(sorted(records)), len(ranked))


@dataclass
class ReleasedDomainReader:
    """Reads the published records of a window's memory windows from the ledger's outbox and learns its domain.

    ``keys``: the deployment's key layout (the release worker's index of released windows,
    ``Keys.release_index("released")``); ``schedule_start`` / ``size``: the public schedule. Records never change once
    stored (no re-roll), so what each (window, type) contributes is kept in memory once read and checked published,
    for as many windows back as the longest memory asked for (one reader serves every type that learns)."""

    client: Any
    keys: Keys
    ledger: ReleaseLedger
    scope_for: Callable[[float], str]
    size: int
    schedule_start: Callable[[], int]
    _found: dict[tuple[int, str], tuple[dict[str, Any], ...]] = field(default_factory=dict)
    _longest: int = 0  # the longest memory asked for: older cached records are dropped

    def domain_for(self, window: Window, rule: DomainRule) -> LearnedDomain:
        starts = memory_windows(window.start, size=self.size, schedule_start=self.schedule_start(),
                                memory=rule.memory_windows)
        self._check_released(window, starts)
        by_scope: dict[str, list[tuple[int, str]]] = {}
        for start in starts:
            for rtype in rule.sources:
                if (start, rtype) not in self._found:
                    by_scope.setdefault(self.scope_for(start), []).append((start, rtype))
        for scope, wanted in by_scope.items():
            rids = [release_id(Window(s, s + self.size), t) for s, t in wanted]
            payloads = self.ledger.stored_many(scope, rids).now()
            unpublished = set(self.ledger.unpublished(scope)) if any(payloads.values()) else set()
            for (start, rtype), rid in zip(wanted, rids):
                payload = payloads.get(rid)
                if payload is not None and rid in unpublished:
                    raise DomainNotPublished(f"window {window.label}: its released domain would read release "
                                             f"{rid}, which is stored but not yet published")
                record = Envelope.loads(payload).record if payload is not None else None
                # only what found_keys reads: the record's type, status and item keys (and ci_low)
                self._found[(start, rtype)] = (() if record is None else (_slim(record),))
        self._longest = max(self._longest, rule.memory_windows)
        self._forget_before(window.start - self._longest * self.size)
        return learn_domain({s: [r for t in rule.sources for r in self._found[(s, t)]] for s in starts}, rule)

    def _check_released(self, window: Window, starts: list[int]) -> None:
        if not starts:
            return
        marks = self.client.zmscore(self.keys.release_index("released"), [str(s) for s in starts])
        missing = [s for s, mark in zip(starts, marks) if mark is None]
        if missing:
            raise DomainNotPublished(f"window {window.label}: its released domain needs the windows starting at "
                                     f"{', '.join(map(str, missing))} released first (windows are released in "
                                     "schedule order)")

    def _forget_before(self, start: int) -> None:
        for key in [k for k in self._found if k[0] < start]:
            del self._found[key]


def _slim(record: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": record.get("type"), "status": record.get("status"),
            "items": [{"key": i["key"], **({"ci_low": i["ci_low"]} if "ci_low" in i else {})}
                      for i in record.get("items") or [] if "key" in i]}


def learned_domain_of_view(records: Sequence[Mapping[str, Any]], rule: DomainRule, window_start: int, *,
                           size: int, schedule_start: int) -> LearnedDomain:
    """What a subscriber computes from the records it read (every record of every window, in any order): the
    domain window ``window_start`` learned under ``rule``. Equal to what the worker recorded (tests check it)."""
    starts = memory_windows(window_start, size=size, schedule_start=schedule_start, memory=rule.memory_windows)
    wanted = set(starts)
    by_window: dict[int, list[Mapping[str, Any]]] = {s: [] for s in starts}
    for record in records:
        start = int(record["window"]["start"])
        if start in wanted:
            by_window[start].append(record)
    return learn_domain(by_window, rule)

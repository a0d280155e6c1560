"""DP events: what a release cost, recorded independently of how it is accounted.

An event is a frozen, parameter-only record (the habit of Google's ``dp_accounting``): it says which
mechanism ran with which privacy parameters, ``count`` times. Accountants turn events into numbers
(:mod:`stream_dp.accounting.composition`); the ledger stores the events of every charged release so each
release carries its own audit trail. The meaning of an event type never changes: add a new type instead.

Each event maps to

- approximate zCDP ``(rho, delta)`` -- the project's accounting currency (ALGORITHMS.md, decision 1):
  ε-range-bounded → ρ = ε²/8 (Cesar & Rogers 2021; Dong, Durfee & Rogers 2020), pure ε-DP → ρ = ε²/2,
  (ε, δ)-DP → ρ = ε²/2 with that δ (the δ is carried as the δ of approximate zCDP);
- basic composition ``(epsilon, delta)`` -- Σε, Σδ; a zCDP event has no pure-ε form, so its basic ε is
  infinite and the composed basic bound is then not used.

``count`` copies of an event compose exactly like ``count`` separate events.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


def _check_epsilon(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_delta(name: str, value: float, *, allow_zero: bool = True) -> None:
    ok = isinstance(value, (int, float)) and (0 <= value < 1 if allow_zero else 0 < value < 1)
    if not ok:
        rng = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must be in {rng}, got {value!r}")


def _check_count(value: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"count must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class DpEvent:
    """Base of all events. Subclasses set ``kind`` and implement :meth:`zcdp` and :meth:`basic`."""

    kind: ClassVar[str] = ""

    def zcdp(self) -> tuple[float, float]:  # pragma: no cover - abstract
        """(ρ, δ) of approximate zCDP for all ``count`` copies."""
        raise NotImplementedError

    def basic(self) -> tuple[float, float]:  # pragma: no cover - abstract
        """(Σε, Σδ) of basic composition for all ``count`` copies."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; :func:`event_from_dict` inverts it."""
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class PureDpEvent(DpEvent):
    """``count`` runs of an ε-DP mechanism (e.g. Laplace noise, a whole sparse-vector instance)."""

    kind: ClassVar[str] = "pure_dp"
    epsilon: float
    count: int = 1
    mechanism: str = ""
    release_id: str | None = field(default=None, compare=True)

    def __post_init__(self) -> None:
        _check_epsilon("epsilon", self.epsilon)
        _check_count(self.count)

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.epsilon**2 / 2, 0.0

    def basic(self) -> tuple[float, float]:
        return self.count * self.epsilon, 0.0


@dataclass(frozen=True)
class RangeBoundedEvent(DpEvent):
    """``count`` ε-range-bounded outcomes (exponential-mechanism / Gumbel peels with monotone scores).

    ``delta`` is the δ of the whole event (not per outcome): limited-domain top-k charges all its returned
    outcomes as one event whose δ is the ⊥-rule δ of the call (DR19 Lemma 5.5; ALGORITHMS.md decision 1).
    """

    kind: ClassVar[str] = "range_bounded"
    epsilon: float
    count: int = 1
    delta: float = 0.0
    mechanism: str = ""
    release_id: str | None = None

    def __post_init__(self) -> None:
        _check_epsilon("epsilon", self.epsilon)
        _check_count(self.count)
        _check_delta("delta", self.delta)

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.epsilon**2 / 8, self.delta

    def basic(self) -> tuple[float, float]:
        return self.count * self.epsilon, self.delta


@dataclass(frozen=True)
class ApproxDpEvent(DpEvent):
    """``count`` runs of an (ε, δ)-DP mechanism (e.g. large margin, private weighted sampling per key)."""

    kind: ClassVar[str] = "approx_dp"
    epsilon: float
    delta: float
    count: int = 1
    mechanism: str = ""
    release_id: str | None = None

    def __post_init__(self) -> None:
        _check_epsilon("epsilon", self.epsilon)
        _check_delta("delta", self.delta)
        _check_count(self.count)

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.epsilon**2 / 2, self.count * self.delta

    def basic(self) -> tuple[float, float]:
        return self.count * self.epsilon, self.count * self.delta


@dataclass(frozen=True)
class ZCdpEvent(DpEvent):
    """``count`` runs of a (ρ, δ)-approximately zCDP mechanism."""

    kind: ClassVar[str] = "zcdp"
    rho: float
    delta: float = 0.0
    count: int = 1
    mechanism: str = ""
    release_id: str | None = None

    def __post_init__(self) -> None:
        _check_epsilon("rho", self.rho)
        _check_delta("delta", self.delta)
        _check_count(self.count)

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.rho, self.count * self.delta

    def basic(self) -> tuple[float, float]:
        return math.inf, self.count * self.delta


EVENT_TYPES: dict[str, type[DpEvent]] = {
    cls.kind: cls for cls in (PureDpEvent, RangeBoundedEvent, ApproxDpEvent, ZCdpEvent)
}


def event_from_dict(data: dict[str, Any]) -> DpEvent:
    """Rebuild an event from :meth:`DpEvent.to_dict` output.

    >>> e = RangeBoundedEvent(epsilon=0.5, count=3, delta=1e-6, mechanism="limited_domain_topk")
    >>> event_from_dict(e.to_dict()) == e
    True
    """
    fields = dict(data)
    kind = fields.pop("kind", None)
    try:
        cls = EVENT_TYPES[kind]
    except KeyError:
        raise ValueError(f"unknown DP event kind {kind!r}; known: {sorted(EVENT_TYPES)}") from None
    return cls(**fields)

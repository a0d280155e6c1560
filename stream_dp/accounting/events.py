"""DP events: what a release cost, recorded independently of how it is accounted.

An event is a frozen, parameter-only record (the habit of Google's ``dp_accounting``): it says which
mechanism ran with which privacy parameters, ``count`` times. Accountants turn events into numbers
(:mod:`stream_dp.accounting.composition`); the ledger stores the events of every charged release so each
release carries its own audit trail. The meaning of an event type never changes: add a new type instead.

Each event maps to

- approximate zCDP ``(rho, delta)`` -- the project's accounting currency (docs/privacy.md §2):
  ε-range-bounded → ρ = ε²/8 (Cesar & Rogers 2021; Dong, Durfee & Rogers 2020), pure ε-DP → ρ = ε²/2,
  (ε, δ)-DP → ρ = ε²/2 with that δ (the δ is carried as the δ of approximate zCDP);
- basic composition ``(epsilon, delta)`` -- Σε, Σδ; a zCDP event has no pure-ε form, so its basic ε is
  infinite and the composed basic bound is then not used.

``count`` means repetitions (``count`` copies compose exactly like ``count`` separate events) for every
type except :class:`RangeBoundedEvent`, where it is the number of outcomes of ONE call whose ``delta`` is
the δ of the whole call. :meth:`DpEvent.repeated` returns the one event equal to ``n`` copies of any event;
the contract suite (tests/unit/test_events_contract.py) checks that for every type.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar


def _number(name: str, value: object) -> float:
    """``value`` as a float; bools, strings and NaN are rejected (numpy scalars are accepted)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return out


def _check_epsilon(name: str, value: object) -> float:
    out = _number(name, value)
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def _check_delta(name: str, value: object) -> float:
    out = _number(name, value)
    if not 0 <= out < 1:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return out


def _check_count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"count must be an integer >= 1, got {value!r}")
    return int(value)


def _check_label(name: str, value: object, *, optional: bool) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise ValueError(f"{name} must be a string{' or None' if optional else ''}, got {value!r}")


def _normalise(event: "DpEvent", **checked: object) -> None:
    """Store validated, plain-Python values (so ``to_dict`` is JSON-serialisable and equality is exact)."""
    for name, value in checked.items():
        object.__setattr__(event, name, value)
    # every event type has both fields; the base declares none (it would put them first in every constructor)
    _check_label("mechanism", getattr(event, "mechanism"), optional=False)  # noqa: B009
    _check_label("release_id", getattr(event, "release_id"), optional=True)  # noqa: B009


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

    def repeated(self, n: int) -> "DpEvent":  # pragma: no cover - abstract
        """One event equivalent to ``n`` independent copies of this one (the contract suite checks it)."""
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
    release_id: str | None = None

    def __post_init__(self) -> None:
        _normalise(self, epsilon=_check_epsilon("epsilon", self.epsilon), count=_check_count(self.count))

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.epsilon**2 / 2, 0.0

    def basic(self) -> tuple[float, float]:
        return self.count * self.epsilon, 0.0

    def repeated(self, n: int) -> "PureDpEvent":
        return replace(self, count=self.count * _check_count(n))


@dataclass(frozen=True)
class RangeBoundedEvent(DpEvent):
    """``count`` ε-range-bounded outcomes (exponential-mechanism / Gumbel peels with monotone scores).

    ``delta`` is the δ of the whole event (not per outcome): limited-domain top-k charges all its returned
    outcomes as one event whose δ is the ⊥-rule δ of the call (DR19 Lemma 5.5; docs/privacy.md §2).
    """

    kind: ClassVar[str] = "range_bounded"
    epsilon: float
    count: int = 1
    delta: float = 0.0
    mechanism: str = ""
    release_id: str | None = None

    def __post_init__(self) -> None:
        _normalise(self, epsilon=_check_epsilon("epsilon", self.epsilon), count=_check_count(self.count),
                   delta=_check_delta("delta", self.delta))

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.epsilon**2 / 8, self.delta

    def basic(self) -> tuple[float, float]:
        return self.count * self.epsilon, self.delta

    def repeated(self, n: int) -> "RangeBoundedEvent":
        """``n`` calls: ``n·count`` outcomes and ``n·delta`` (δ belongs to the call, not to an outcome)."""
        n = _check_count(n)
        return replace(self, count=self.count * n, delta=_check_delta("n * delta", self.delta * n))


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
        _normalise(self, epsilon=_check_epsilon("epsilon", self.epsilon), delta=_check_delta("delta", self.delta),
                   count=_check_count(self.count))

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.epsilon**2 / 2, self.count * self.delta

    def basic(self) -> tuple[float, float]:
        return self.count * self.epsilon, self.count * self.delta

    def repeated(self, n: int) -> "ApproxDpEvent":
        return replace(self, count=self.count * _check_count(n))


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
        _normalise(self, rho=_check_epsilon("rho", self.rho), delta=_check_delta("delta", self.delta),
                   count=_check_count(self.count))

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.rho, self.count * self.delta

    def basic(self) -> tuple[float, float]:
        """No finite pure-ε bound exists for a general ρ-zCDP mechanism (e.g. Gaussian noise): ε = ∞."""
        return math.inf, self.count * self.delta

    def repeated(self, n: int) -> "ZCdpEvent":
        return replace(self, count=self.count * _check_count(n))


@dataclass(frozen=True)
class ZCdpAndApproxDpEvent(DpEvent):
    """``count`` runs of a mechanism with TWO valid guarantees: (ρ, ``zcdp_delta``)-approximate zCDP and
    (ε, δ)-DP (e.g. the histogram calibrated by its exact joint privacy profile, docs/privacy.md §8c: its
    Gaussian counts are ρ-zCDP up to the threshold's δ, and its exact profile gives (ε, δ) for one run).

    The zCDP map is the zCDP pair, the basic map the (ε, δ) pair: each route of the accounting (the ledger's
    cap takes the smaller valid ε of the two routes, with the larger of the two δs) uses the guarantee that
    is its own, so one release is charged its exact (ε, δ) while long horizons keep zCDP composition.
    """

    kind: ClassVar[str] = "zcdp_and_approx_dp"
    rho: float
    zcdp_delta: float
    epsilon: float
    delta: float
    count: int = 1
    mechanism: str = ""
    release_id: str | None = None

    def __post_init__(self) -> None:
        _normalise(self, rho=_check_epsilon("rho", self.rho), zcdp_delta=_check_delta("zcdp_delta", self.zcdp_delta),
                   epsilon=_check_epsilon("epsilon", self.epsilon), delta=_check_delta("delta", self.delta),
                   count=_check_count(self.count))

    def zcdp(self) -> tuple[float, float]:
        return self.count * self.rho, self.count * self.zcdp_delta

    def basic(self) -> tuple[float, float]:
        return self.count * self.epsilon, self.count * self.delta

    def repeated(self, n: int) -> "ZCdpAndApproxDpEvent":
        return replace(self, count=self.count * _check_count(n))


EVENT_TYPES: dict[str, type[DpEvent]] = {
    cls.kind: cls for cls in (PureDpEvent, RangeBoundedEvent, ApproxDpEvent, ZCdpEvent, ZCdpAndApproxDpEvent)
}


def event_from_dict(data: dict[str, Any]) -> DpEvent:
    """Rebuild an event from :meth:`DpEvent.to_dict` output.

    >>> e = RangeBoundedEvent(epsilon=0.5, count=3, delta=1e-6, mechanism="limited_domain_topk")
    >>> event_from_dict(e.to_dict()) == e
    True
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"a DP event must be a mapping, got {type(data).__name__}")
    fields = dict(data)
    kind = fields.pop("kind", None)
    try:
        cls = EVENT_TYPES[kind]
    except (KeyError, TypeError):
        raise ValueError(f"unknown DP event kind {kind!r}; known: {sorted(EVENT_TYPES)}") from None
    known = {f.name for f in dataclass_fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(str, unknown))} for DP event kind {kind!r}")
    try:
        return cls(**fields)
    except TypeError as exc:  # a required parameter is missing
        raise ValueError(f"DP event of kind {kind!r}: {exc}") from None

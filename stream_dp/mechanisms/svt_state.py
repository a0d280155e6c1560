"""Validation of the state of :class:`~stream_dp.mechanisms.svt.AdaptiveSVT`.

The state holds the public parameters, the secret noisy threshold and the answer counters -- and nothing
from which past noise could be recomputed: no generator state, seed or key (docs/privacy.md §5b). A resumed
instance draws fresh query noise; only its threshold noise is carried over (re-drawing it would be an
averaging attack). A state that carries a generator (``rng`` other than null, as older versions wrote)
is refused.

Every field is checked for type, range and consistency with the others (the budget split, the cost, the
break rule) before anything is built; a bad state raises ``ValueError`` naming the field. Messages never
echo the noisy threshold or other secret values.
"""

from __future__ import annotations

import math
from typing import Any

from stream_dp.mechanisms.svt_noise import NOISES

STATE_VERSION = 1
_REL = 1e-9


def _number(state: dict[str, Any], name: str, *, positive: bool = False) -> float:
    value = state.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"state field {name!r} must be a finite number")
    if positive and value <= 0:
        raise ValueError(f"state field {name!r} must be > 0")
    return float(value)


def _count(state: dict[str, Any], name: str, *, minimum: int = 0) -> int:
    value = state.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"state field {name!r} must be an integer >= {minimum}")
    return value


def _flag(state: dict[str, Any], name: str) -> bool:
    value = state.get(name)
    if not isinstance(value, bool):
        raise ValueError(f"state field {name!r} must be a boolean")
    return value


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(abs(a), abs(b), 1e-300)


def validate_state(state: Any) -> dict[str, Any]:
    """Check a frozen AdaptiveSVT state and return its fields with their Python types."""
    if not isinstance(state, dict):
        raise ValueError(f"state must be a dict, got {type(state).__name__}")
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"state field 'version' must be {STATE_VERSION}")
    if state.get("mechanism") != "adaptive_svt":
        raise ValueError("state field 'mechanism' must be 'adaptive_svt'")
    out: dict[str, Any] = {"threshold": _number(state, "threshold"), "k": _count(state, "k", minimum=1),
                           "epsilon": _number(state, "epsilon", positive=True)}
    if state.get("noise") not in NOISES:
        raise ValueError(f"state field 'noise' must be one of {NOISES}")
    out["noise"] = state["noise"]
    out["monotone"], out["adaptive"] = _flag(state, "monotone"), _flag(state, "adaptive")
    theta = _number(state, "theta")
    if not 0 < theta < 1:
        raise ValueError("state field 'theta' must be in (0, 1)")
    out["theta"] = theta
    eps, k = out["epsilon"], out["k"]
    expected = {"epsilon0": theta * eps, "epsilon1": (1 - theta) * eps / k,
                "epsilon2": (1 - theta) * eps / k / 2}
    for name, want in expected.items():
        if not _close(_number(state, name, positive=True), want):
            raise ValueError(f"state field {name!r} does not match epsilon, theta and k")
    out["threshold_noise"] = _number(state, "threshold_noise")
    if not _close(_number(state, "noisy_threshold"), out["threshold"] + out["threshold_noise"]):
        raise ValueError("state field 'noisy_threshold' does not match threshold + threshold_noise")
    out["queries"], out["top"], out["middle"] = (_count(state, n) for n in ("queries", "top", "middle"))
    if not out["adaptive"] and out["top"]:
        raise ValueError("state field 'top' must be 0 when adaptive is false")
    units = out["top"] + 2 * out["middle"]
    if units > 2 * k:
        raise ValueError("state fields 'top' and 'middle' exceed the budget of the instance")
    if out["top"] + out["middle"] > out["queries"]:
        raise ValueError("state field 'queries' is smaller than the number of answers above")
    spent = expected["epsilon0"] + expected["epsilon2"] * out["top"] + expected["epsilon1"] * out["middle"]
    if not _close(_number(state, "spent", positive=True), spent):
        raise ValueError("state field 'spent' does not match epsilon0 + epsilon2*top + epsilon1*middle")
    if _flag(state, "exhausted") != (units > 2 * (k - 1)):
        raise ValueError("state field 'exhausted' contradicts the budget rule")
    if state.get("rng") is not None:
        raise ValueError("state field 'rng' must be null or absent: a stored generator state would let past "
                         "noise be recomputed")
    return out

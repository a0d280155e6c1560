"""Release settings renamed to the window-budget language: every batch release type is configured by the budget of
one release in one window, ``window_epsilon`` (and ``window_delta``), and calibrated from it by
:mod:`stream_dp.release.window_budget` -- the rule the library and the evaluation use too.

The keys they replace keep working, each with one warning line naming its replacement (once per process):

- ``releases.sample`` / ``argmax`` / ``watch_topk`` ``epsilon`` and ``delta`` already meant the window budget: they
  are read as ``window_epsilon`` / ``window_delta``;
- ``releases.topk.epsilon`` (ε per returned outcome) and ``delta`` (the ⊥ rule's δ), and
  ``releases.histogram.epsilon`` (ε at δ′ = ``budget.delta_prime``) and ``delta`` (the threshold's δ), meant
  mechanism parameters: they keep that meaning (the release is calibrated as before) until they are replaced.

Setting an old key and its replacement together in one place is an error naming both. Across places the usual
precedence holds: an environment variable (either name) overrides the file's key (either name), as it would
override the same name (:func:`shadowed_by`); and a loaded config written back to a mapping (which carries
the replacement's default beside a deprecated key in effect) keeps the deprecated key (:func:`in_effect`).

>>> data = renamed("releases.sample", {"epsilon": 0.5, "tau": 0.01})
>>> data
{'tau': 0.01, 'window_epsilon': 0.5}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stream_dp.errors import StreamDPError

log = logging.getLogger("stream_dp.config")

# section -> old key -> (replacement, what the old key still means; None: the same as the replacement)
RENAMED: dict[str, dict[str, tuple[str, str | None]]] = {
    "releases.topk": {
        "epsilon": ("window_epsilon", "ε per returned outcome"),
        "delta": ("window_delta", "the ⊥ rule's δ per release"),
    },
    "releases.histogram": {
        "epsilon": ("window_epsilon", "ε of one release at δ′ = budget.delta_prime"),
        "delta": ("window_delta", "the threshold's δ"),
    },
    "releases.sample": {"epsilon": ("window_epsilon", None), "delta": ("window_delta", None)},
    "releases.argmax": {"epsilon": ("window_epsilon", None), "delta": ("window_delta", None)},
    "releases.watch_topk": {"epsilon": ("window_epsilon", None)},
}
_warned: set[str] = set()


class BothSet(ValueError, StreamDPError):
    """An old key and its replacement are both set."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__(f"unset when {new} is set (it is the deprecated name of {new})")
        self.old, self.new = old, new


def message(section: str, old: str) -> str:
    """The one warning line of a deprecated key.

    >>> message("releases.topk", "epsilon")  # doctest: +NORMALIZE_WHITESPACE
    'releases.topk.epsilon is deprecated: set releases.topk.window_epsilon (the window budget of one release,
    see config/stream-dp.toml); until then it keeps its meaning (ε per returned outcome)'
    """
    new, meaning = RENAMED[section][old]
    still = f"until then it keeps its meaning ({meaning})" if meaning else "it is read as that"
    return (f"{section}.{old} is deprecated: set {section}.{new} (the window budget of one release, "
            f"see config/stream-dp.toml); {still}")


def renamed(section: str, data: Any) -> Any:
    """A release section's raw settings with the deprecated keys handled (module docstring): same-meaning keys
    moved to their replacement, others left for the section's legacy fields; a warning per key and process;
    :class:`BothSet` when a key and its replacement are both given."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for old, (new, meaning) in RENAMED.get(section, {}).items():
        if out.get(old) is None:  # absent, or unset in a config turned back into a mapping (to_dict)
            out.pop(old, None)
            continue
        if new in out:
            raise BothSet(old, f"{section}.{new}")
        name = f"{section}.{old}"
        if name not in _warned:
            _warned.add(name)
            log.warning(message(section, old))
        if meaning is None:
            out[new] = out.pop(old)
    return out


def _section(data: Any, section: str) -> Any:
    for part in section.split("."):
        data = data.get(part) if isinstance(data, Mapping) else None
    return data


def shadowed_by(data: dict[str, Any], overridden: set[str]) -> dict[str, Any]:
    """``data`` (a file's nested settings) without the keys an environment variable overrides under the other
    name: with ``STREAM_DP_RELEASES__HISTOGRAM__EPSILON`` set, the file's ``window_epsilon`` gives way (and the
    other way round), as the file's ``epsilon`` would. ``overridden``: the dotted names the environment sets.

    >>> shadowed_by({"releases": {"topk": {"window_epsilon": 0.8, "k": 5}}}, {"releases.topk.epsilon"})
    {'releases': {'topk': {'k': 5}}}
    """
    out = _copy(data)
    for section, table, old, new in _pairs(out):
        if f"{section}.{old}" in overridden:
            table.pop(new, None)
        if f"{section}.{new}" in overridden:
            table.pop(old, None)
    return out


def in_effect(data: dict[str, Any]) -> dict[str, Any]:
    """A loaded config's mapping (``Config.to_dict``) ready to load again: where a deprecated key is in effect,
    the replacement's default written beside it is dropped."""
    out = _copy(data)
    for _, table, old, new in _pairs(out):
        if table.get(old) is not None:
            table.pop(new, None)
    return out


def _pairs(data: dict[str, Any]) -> list[tuple[str, dict[str, Any], str, str]]:
    """(section, its table in ``data``, old key, new key) for each renamed key whose section ``data`` has."""
    found: list[tuple[str, dict[str, Any], str, str]] = []
    for section, keys in RENAMED.items():
        table = _section(data, section)
        if isinstance(table, dict):
            found.extend((section, table, old, new) for old, (new, _) in keys.items())
    return found


def _copy(data: Any) -> Any:
    return {k: _copy(v) for k, v in data.items()} if isinstance(data, Mapping) else data

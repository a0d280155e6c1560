"""A release type's public domain in one window: the static keys (``releases.<type>.domain``, ``domain_file``)
and -- with ``domain_from_released`` -- the keys earlier windows published (:mod:`stream_dp.release.released_domain`
learns those), and the ``domain`` block its record states. Public facts only: never a raw count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stream_dp.config import Config

if TYPE_CHECKING:
    from stream_dp.release.released_domain import LearnedDomain, ReleasedDomainReader
    from stream_dp.release.windows import Window


@dataclass(frozen=True)
class DomainRule:
    """How a type learns its domain: from which types' records, over how many windows, how many keys, in
    which order (``releases.<type>.domain_*``)."""

    sources: tuple[str, ...]
    memory_windows: int
    max_keys: int
    order: str = "recent"

    @classmethod
    def of(cls, cfg: Config, release_type: str) -> "DomainRule | None":
        """The rule of ``releases.<release_type>``, or None when it does not learn its domain."""
        section = getattr(cfg.releases, release_type)
        if not section.domain_from_released:
            return None
        return cls(cfg.releases.domain_sources(release_type), section.domain_memory_windows,
                   section.domain_max_keys, section.domain_order)


def domain_block(static: Sequence[str], learned: LearnedDomain | None) -> tuple[list[str], dict[str, Any]]:
    """The domain a release uses -- the static keys (config, file) in their order, then the learned keys not
    among them -- and the record's ``domain`` block: its size, how many keys are static, and (when learned)
    where the rest came from (:meth:`LearnedDomain.provenance`)."""
    keys = list(dict.fromkeys([*static, *(learned.keys if learned is not None else ())]))
    block: dict[str, Any] = {"size": len(keys), "static": len(static)}
    if learned is not None:
        block["from_released"] = learned.provenance()
    return keys, block


@dataclass
class Domained:
    """A mechanism's input together with the public domain the window uses and the record's ``domain`` block
    (None when the type has no domain configured)."""

    data: Any
    domain: list[str]
    block: dict[str, Any] | None


@dataclass
class PublicDomain:
    """A release type's public domain, per window: the static keys (config, file) and -- with a ``rule`` -- the
    keys learned from earlier releases (``reader``: set by the release worker, which owns the ledger)."""

    static: list[str]
    rule: DomainRule | None
    reader: ReleasedDomainReader | None = None

    @property
    def configured(self) -> bool:
        return bool(self.static) or self.rule is not None

    def for_window(self, window: Window) -> tuple[list[str], dict[str, Any] | None]:
        """The window's domain and the record's ``domain`` block (None when no domain is configured)."""
        if self.rule is None:
            return list(self.static), ({"size": len(self.static), "static": len(self.static)} if self.static else None)
        if self.reader is None:
            raise RuntimeError("a released domain is read by the release worker's ReleasedDomainReader, which was "
                               "not given to this builder")
        return domain_block(self.static, self.reader.domain_for(window, self.rule))


def read_domain_file(path: str, section: str) -> list[str]:
    """The static keys of ``releases.<type>.domain_file``, one per line (blank lines skipped); a file that cannot
    be read names the setting (``section``, e.g. ``"releases.topk"``)."""
    if not path:
        return []
    from stream_dp.config import ConfigError

    try:
        with open(path, encoding="utf-8") as fh:
            return [line.strip() for line in fh if line.strip()]
    except OSError as exc:
        raise ConfigError(f"{section}.domain_file {path!r} cannot be read: {exc.strerror}") from None

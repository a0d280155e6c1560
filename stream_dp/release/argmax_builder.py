"""The ``argmax`` release's builder: the large margin mechanism (CHS14 Algorithm 1), the single top key over
the config's public universe of keys. It reads the window's counts best first, only as far as the mechanism's
search goes (:mod:`stream_dp.release.argmax_prefix`). The steps are :class:`~stream_dp.release.builders.Builder`'s."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from stream_dp.config import Config
from stream_dp.node_batches import ReadStep
from stream_dp.release.argmax_prefix import WindowPrefix
from stream_dp.release.records import RecordDraft
from stream_dp.release.windows import Window, WindowReader

if TYPE_CHECKING:
    from stream_dp.mechanisms import LargeMargin


@dataclass
class ArgmaxBuilder:
    """Large margin mechanism (CHS14 Algorithm 1): the single top key, range-independent."""

    cfg: Config
    type: str = "argmax"
    mechanism: str = "large_margin"

    def parameters(self) -> dict[str, Any]:
        a = self.cfg.releases.argmax
        return {"epsilon": a.window_epsilon, "delta": a.window_delta}

    @cached_property
    def measurement(self) -> LargeMargin:
        from stream_dp.mechanisms import LargeMargin

        a = self.cfg.releases.argmax
        return LargeMargin(epsilon=a.window_epsilon, delta=a.window_delta)

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        """The first prefix of the window's sorted counts (in the reservation's round trip where it is one
        batch); the mechanism reads further only when its search goes past it."""
        return WindowPrefix.read(reader, window)

    def universe_size(self) -> int:
        """The public universe: every key the config admits (byte strings of 1..events.max_key_bytes bytes).

        It must not depend on the data (CHS14 Algorithm 1's universe), so it is not the set of keys seen in the window; the
        unseen ones have count 0 and are never enumerated (large_margin_argmax's implicit universe).
        """
        m = self.cfg.events.max_key_bytes
        return (256 ** (m + 1) - 256) // 255

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft:
        from stream_dp.mechanisms import UNLISTED

        m = self.measurement
        # Scores are counts of distinct users: 1-Lipschitz per user, i.e. f = count / n with n = 1. The universe
        # is max(the public universe, the window's keys): the latter is never larger (ingest bounds key bytes).
        key = m(data, n=1, universe_size=self.universe_size(), rng=rng)
        unlisted = key is UNLISTED
        items = [] if unlisted else [{"key": str(key), "rank": 1}]
        return RecordDraft(window, self.type, self.mechanism, self.parameters(), items=items, events=m.realized(key),
                           info={"no_clear_winner": unlisted})

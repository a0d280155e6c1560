"""The ``watch_topk`` release's builder: noisy top-k with gap (Ding et al., seed 003) over the public
watchlist, with free gaps. The steps are :class:`~stream_dp.release.builders.Builder`'s."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from stream_dp.config import Config
from stream_dp.mechanisms.measurement import Measurement
from stream_dp.node_batches import ReadStep
from stream_dp.release.records import RecordDraft
from stream_dp.release.windows import Window, WindowReader


@dataclass
class WatchTopkBuilder:
    """Noisy top-k with gap (Ding et al.) over the public watchlist: ranks and free gaps."""

    cfg: Config
    type: str = "watch_topk"
    mechanism: str = "noisy_topk_with_gap"

    def parameters(self) -> dict[str, Any]:
        w = self.cfg.releases.watch_topk
        return {"k": w.k, "epsilon": w.window_epsilon, "noise": w.noise, "monotone": True}

    @cached_property
    def measurement(self) -> Measurement[Any]:
        return self.measurement_for(self.cfg.releases.watch_topk.k)

    def measurement_for(self, k: int) -> Any:
        """Noisy top-``k`` with gap at the configured ε (the cost does not depend on k)."""
        from stream_dp.mechanisms import NoisyTopkWithGap

        w = self.cfg.releases.watch_topk
        return NoisyTopkWithGap(k=k, epsilon=w.window_epsilon, noise=w.noise, monotone=True)

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        return reader.counts_of(window, watchlist)

    def skip_reason(self, watchlist: list[str]) -> str | None:
        """Noisy top-k with gap needs k+1 watched keys; with fewer there is nothing to release (and no cost)."""
        return None if len(watchlist) >= 2 else "watchlist_too_small"

    def run(self, window: Window, data: dict[str, float], rng: Any) -> RecordDraft:
        p = self.parameters()
        # the k-th gap needs the (k+1)-th answer; the cost does not depend on k
        m = self.measurement_for(min(p["k"], len(data) - 1))
        ranked = m(data, rng=rng)
        as_number = int if p["noise"] == "geometric" else float  # discrete noise: integer gaps
        items = [{"key": str(key), "rank": i + 1, "gap": as_number(gap)} for i, (key, gap) in enumerate(ranked)]
        return RecordDraft(window, self.type, self.mechanism, p, items=items, events=m.realized(ranked),
                           info={"watchlist_size": len(data)})

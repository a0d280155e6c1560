"""Release builders: for each batch release type, what to read, what to reserve, and how to run it.

A builder is a small object with one job per step, so the worker treats every type alike:

- ``reserve_events()`` -- the worst-case DP events of one run, reserved in the ledger *before* the mechanism
  runs (a release the budget cannot cover never runs, ALGORITHMS decision 2);
- ``read(reader, window, watchlist)`` -- only the data the mechanism needs (top k̄+1 for top-k, the watched
  keys' counts for watch_topk, the count histogram and then the reported keys for sampling, the whole window
  for the large-margin mechanism);
- ``run(window, data, rng)`` -- call the pure mechanism and build the record draft whose events are what the
  release actually costs (pay-what-you-get for top-k: the outcomes returned, DR19 §1.9).

The online ``alerts`` type keeps state across windows and lives in :mod:`stream_dp.release.alerts`.
``BUILDERS`` is a dispatch table (one entry per type, each tested), not an ``isinstance`` chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from stream_dp.accounting.events import DpEvent
from stream_dp.config import Config
from stream_dp.release.records import RecordDraft
from stream_dp.release.windows import Window, WindowReader


class Builder(Protocol):
    type: str
    mechanism: str

    def parameters(self) -> dict[str, Any]: ...

    def reserve_events(self) -> tuple[DpEvent, ...]: ...

    def skip_reason(self, watchlist: list[str]) -> str | None: ...

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> Any: ...

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft: ...


@dataclass
class TopkBuilder:
    """Limited-domain top-k (DR19 Algorithm 1): reads the top k̄+1 counts, returns ≤ k keys and ⊥ flag."""

    cfg: Config
    type: str = "topk"
    mechanism: str = "limited_domain_topk"

    def parameters(self) -> dict[str, Any]:
        t = self.cfg.releases.topk
        return {"k": t.k, "k_bar": t.k_bar, "epsilon": t.epsilon, "delta": t.delta,
                "max_keys_per_user": self.cfg.contribution.max_keys_per_user}

    def reserve_events(self) -> tuple[DpEvent, ...]:
        from stream_dp.mechanisms import limited_domain_topk_max_events

        t = self.cfg.releases.topk
        return tuple(limited_domain_topk_max_events(k=t.k, epsilon=t.epsilon, delta=t.delta))

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> dict[str, float]:
        return reader.top_counts(window, self.cfg.releases.topk.k_bar + 1)

    def run(self, window: Window, data: dict[str, float], rng: Any) -> RecordDraft:
        from stream_dp.mechanisms import limited_domain_topk

        p = self.parameters()
        res = limited_domain_topk(data, k=p["k"], k_bar=p["k_bar"], epsilon=p["epsilon"], delta=p["delta"],
                                  max_keys_per_user=p["max_keys_per_user"], rng=rng)
        items = [{"key": str(key), "rank": i + 1} for i, key in enumerate(res.keys)]
        return RecordDraft(window, self.type, self.mechanism, p, items=items, hit_bottom=bool(res.hit_bottom),
                           events=tuple(res.events), info={"outcomes": int(res.outcomes)})


@dataclass
class SampleBuilder:
    """Private weighted sampling (CGSS21, "late" Algorithm 4): reads the window's count histogram, then only
    the keys it reports (:func:`stream_dp.release.sampling.sample_count_classes`)."""

    cfg: Config
    type: str = "sample"
    mechanism: str = "private_weighted_sample"

    WARM_UP_ROWS = 1024
    """Sanitizer-table rows (and their estimates) built when the builder is made, i.e. when the worker starts."""

    def __post_init__(self) -> None:
        """Build the Algorithm-4 table and its estimates ahead of the first window (0.1-0.3 s for typical
        parameters, else paid by the first release). A function of public parameters only; process-wide cache."""
        if self.cfg.releases.sample.enabled:
            self.warm_up(self.WARM_UP_ROWS)

    def warm_up(self, rows: int) -> None:
        from stream_dp.mechanisms.pws import sanitizer_table
        from stream_dp.mechanisms.pws_estimators import estimator_for

        p = self.parameters()
        table = sanitizer_table(scheme=p["scheme"], tau=p["tau"], epsilon=p["epsilon"], delta=p["delta"],
                                max_keys_per_user=p["max_keys_per_user"])
        table.extend_to(rows)
        estimates = estimator_for(table, kind="mle")
        for token in range(1, min(table.built, rows) + 2):
            estimates.estimate(token)

    def parameters(self) -> dict[str, Any]:
        s = self.cfg.releases.sample
        return {"scheme": s.scheme, "tau": s.tau, "epsilon": s.epsilon, "delta": s.delta,
                "max_keys_per_user": self.cfg.contribution.max_keys_per_user}

    def reserve_events(self) -> tuple[DpEvent, ...]:
        from stream_dp.mechanisms import private_weighted_sample_events

        s = self.cfg.releases.sample
        return tuple(private_weighted_sample_events(epsilon=s.epsilon, delta=s.delta,
                                                    max_keys_per_user=self.cfg.contribution.max_keys_per_user))

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> Any:
        """The count classes, and how to read the keys at given ranks (run reads only the reported ones)."""
        from functools import partial

        from stream_dp.release.sampling import count_classes

        return count_classes(reader.count_histogram(window)), partial(reader.members_at, window)

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft:
        from stream_dp.release.sampling import sample_count_classes

        p = self.parameters()
        classes, members_at = data
        res = sample_count_classes(classes, members_at, scheme=p["scheme"], tau=p["tau"], epsilon=p["epsilon"],
                                   delta=p["delta"], max_keys_per_user=p["max_keys_per_user"], rng=rng)
        items = [{"key": str(row.key), "token": float(row.token), "estimate": float(row.estimate)}
                 for row in res.rows]
        # the mechanism's own public parameters (incl. the estimator) let subscribers recompute estimates
        return RecordDraft(window, self.type, self.mechanism, {**p, **res.parameters()}, items=items,
                           events=tuple(res.events), info={"sampled": len(items)})


@dataclass
class ArgmaxBuilder:
    """Large margin mechanism (CHS14 Algorithm 1): the single top key, range-independent."""

    cfg: Config
    type: str = "argmax"
    mechanism: str = "large_margin"

    def parameters(self) -> dict[str, Any]:
        a = self.cfg.releases.argmax
        return {"epsilon": a.epsilon, "delta": a.delta}

    def reserve_events(self) -> tuple[DpEvent, ...]:
        from stream_dp.mechanisms import large_margin_events

        a = self.cfg.releases.argmax
        return tuple(large_margin_events(epsilon=a.epsilon, delta=a.delta))

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> Any:
        return reader.all_counts(window)

    def universe_size(self) -> int:
        """The public universe: every key the config admits (byte strings of 1..events.max_key_bytes bytes).

        It must not depend on the data (CHS14 §2.1), so it is not the set of keys seen in the window; the
        unseen ones have count 0 and are never enumerated (large_margin_argmax's implicit universe).
        """
        m = self.cfg.events.max_key_bytes
        return (256 ** (m + 1) - 256) // 255

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft:
        from stream_dp.mechanisms import UNLISTED, large_margin_argmax

        p = self.parameters()
        # Scores are counts of distinct users: 1-Lipschitz per user, i.e. f = count / n with n = 1.
        key = large_margin_argmax(data.as_dict(), epsilon=p["epsilon"], delta=p["delta"], n=1,
                                  universe_size=max(len(data), self.universe_size()), rng=rng)
        unlisted = key is UNLISTED
        items = [] if unlisted else [{"key": str(key), "rank": 1}]
        return RecordDraft(window, self.type, self.mechanism, p, items=items, events=self.reserve_events(),
                           info={"no_clear_winner": unlisted})


@dataclass
class WatchTopkBuilder:
    """Noisy top-k with gap (Ding et al.) over the public watchlist: ranks and free gaps."""

    cfg: Config
    type: str = "watch_topk"
    mechanism: str = "noisy_topk_with_gap"

    def parameters(self) -> dict[str, Any]:
        w = self.cfg.releases.watch_topk
        return {"k": w.k, "epsilon": w.epsilon, "noise": w.noise, "monotone": True}

    def reserve_events(self) -> tuple[DpEvent, ...]:
        from stream_dp.mechanisms import noisy_topk_with_gap_events

        return tuple(noisy_topk_with_gap_events(epsilon=self.cfg.releases.watch_topk.epsilon))

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> dict[str, float]:
        return reader.counts_of(window, watchlist)

    def skip_reason(self, watchlist: list[str]) -> str | None:
        """Noisy top-k with gap needs k+1 watched keys; with fewer there is nothing to release (and no cost)."""
        return None if len(watchlist) >= 2 else "watchlist_too_small"

    def run(self, window: Window, data: dict[str, float], rng: Any) -> RecordDraft:
        from stream_dp.mechanisms import noisy_topk_with_gap

        p = self.parameters()
        k = min(p["k"], len(data) - 1)  # the k-th gap needs the (k+1)-th answer; the cost does not depend on k
        ranked = noisy_topk_with_gap(data, k=k, epsilon=p["epsilon"], monotone=True, noise=p["noise"], rng=rng)
        items = [{"key": str(key), "rank": i + 1, "gap": float(gap)} for i, (key, gap) in enumerate(ranked)]
        return RecordDraft(window, self.type, self.mechanism, p, items=items, events=self.reserve_events(),
                           info={"watchlist_size": len(data)})


BUILDERS: dict[str, Callable[[Config], Builder]] = {
    "topk": TopkBuilder,
    "sample": SampleBuilder,
    "argmax": ArgmaxBuilder,
    "watch_topk": WatchTopkBuilder,
}


def enabled_types(cfg: Config) -> list[str]:
    """Release types the config enables, in release order (top-k first: alerts watch what it released)."""
    r = cfg.releases
    order = [("topk", r.topk.enabled), ("alerts", r.alerts.enabled), ("sample", r.sample.enabled),
             ("argmax", r.argmax.enabled), ("watch_topk", r.watch_topk.enabled)]
    return [name for name, on in order if on]

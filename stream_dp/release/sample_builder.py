"""The ``sample`` release's builder: private weighted sampling (CGSS21, "late" Algorithm 4) over the
window's count classes, reading only the keys it reports. The steps are
:class:`~stream_dp.release.builders.Builder`'s."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from stream_dp.config import Config
from stream_dp.mechanisms.measurement import Measurement
from stream_dp.node_batches import ReadStep
from stream_dp.release import drafts
from stream_dp.release.records import RecordDraft
from stream_dp.release.windows import Window, WindowReader


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
        return {"scheme": s.scheme, "tau": s.tau, "epsilon": s.window_epsilon, "delta": s.window_delta,
                "max_keys_per_user": self.cfg.contribution.max_keys_per_user}

    @cached_property
    def measurement(self) -> Measurement[Any]:
        from stream_dp.mechanisms import PrivateWeightedSample

        s = self.cfg.releases.sample
        return PrivateWeightedSample(scheme=s.scheme, tau=s.tau, epsilon=s.window_epsilon, delta=s.window_delta,
                                     max_keys_per_user=self.cfg.contribution.max_keys_per_user)

    def skip_reason(self, watchlist: list[str]) -> str | None:
        return None

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        """The count classes, and how to read the keys at given ranks (run reads only the reported ones): a
        walk of the count histogram in chunks, not one command."""
        from functools import partial

        from stream_dp.release.sampling import count_classes

        return ReadStep(lambda: (count_classes(reader.count_histogram(window)), partial(reader.members_at, window)))

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft:
        from stream_dp.release.sampling import sample_count_classes

        p = self.parameters()
        classes, members_at = data
        res = sample_count_classes(classes, members_at, scheme=p["scheme"], tau=p["tau"], epsilon=p["epsilon"],
                                   delta=p["delta"], max_keys_per_user=p["max_keys_per_user"], rng=rng)
        return drafts.sample_draft(window, p, res, self.measurement)

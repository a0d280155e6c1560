"""Equal privacy per window: calibrate every method so its whole release is (ε_w, δ_w)-DP.

The rule (stated in the report): a method's release in one window is described by its DP events; the
project's accountant (:func:`stream_dp.accounting.composition.compose`) composes them into Σρ (approximate
zCDP), Σε and Σδ (basic). The release is then (ε, δ_w)-DP with the better of

* basic composition: ε = Σε, valid when Σδ ≤ δ_w;
* zCDP conversion (the ledger's: Canonne, Kamath & Steinke 2020, Cor. 13,
  :func:`~stream_dp.accounting.composition.zcdp_to_epsilon`): ε = ε_CKS(Σρ, δ′), with the slack
  δ′ = δ_w − Σδ given to the conversion.

Each method gets the largest noise parameter whose guarantee is ≤ ε_w (bisection; every guarantee is
increasing in the parameter). The rule and stream-dp's own calibrations (limited-domain top-k, known-domain top-k,
the histograms) are the package's, :mod:`stream_dp.release.window_budget` -- what the release worker and
:mod:`stream_dp.api` use; this module adds the baselines'. Limited-domain top-k is judged by its worst case -- k outcomes, which is what
the ledger reserves before it runs (docs/privacy.md §4) -- with δ_⊥ = δ_w/2; the full-domain
baseline has no mechanism δ, so all of δ_w goes to the conversion; the Laplace baseline is one (ε, δ)
event, so basic composition gives it exactly (ε_w, δ_w).
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_dp.accounting.events import DpEvent, RangeBoundedEvent
from stream_dp.release.window_budget import (  # the rule the evaluation states (tests import it from here)
    known_domain_parameters,
    largest_parameter,
    topk_parameters,
    window_epsilon,
)

from eval import baselines


@dataclass(frozen=True)
class Calibrated:
    """Noise parameters of every method at one (ε_w, δ_w, k), all with the same window guarantee."""

    epsilon_w: float
    delta_w: float
    k: int
    ldt_epsilon: float  # per outcome
    ldt_delta: float  # δ of the ⊥ rule
    em_epsilon: float  # per peel of the full-domain Gumbel top-k
    lap_epsilon: float
    lap_delta: float
    split_select_epsilon: float
    split_select_delta: float
    split_em_epsilon: float

    def ldt_events(self) -> tuple[DpEvent, ...]:
        """Worst case of limited-domain top-k: k outcomes (a RangeBoundedEvent with count = outcomes)."""
        return (RangeBoundedEvent(self.ldt_epsilon, count=self.k, delta=self.ldt_delta,
                                  mechanism="limited_domain_topk"),)

    def method_events(self) -> dict[str, tuple[DpEvent, ...]]:
        """The events each method's release costs, by method name."""
        return {
            "ldt": self.ldt_events(),
            "full_domain_em": baselines.full_domain_topk_events(k=self.k, epsilon=self.em_epsilon),
            "laplace_threshold": baselines.laplace_partition_events(epsilon=self.lap_epsilon, delta=self.lap_delta),
            "laplace_then_em": baselines.select_then_em_events(
                k=self.k, select_epsilon=self.split_select_epsilon, select_delta=self.split_select_delta,
                em_epsilon=self.split_em_epsilon),
        }


def calibrate(epsilon_w: float, delta_w: float, k: int) -> Calibrated:
    """All methods at window guarantee (ε_w, δ_w) for top-``k``.

    >>> c = calibrate(1.0, 1e-6, 10)
    >>> all(window_epsilon(ev, 1e-6) <= 1.0 + 1e-9 for ev in c.method_events().values())
    True
    >>> c.lap_epsilon, round(c.ldt_epsilon, 3)
    (1.0, 0.135)
    """
    if not (epsilon_w > 0 and 0 < delta_w < 1 and k >= 1):
        raise ValueError(f"need epsilon_w > 0, 0 < delta_w < 1, k >= 1; got {epsilon_w!r}, {delta_w!r}, {k!r}")
    ldt = topk_parameters(epsilon_w, delta_w, k)
    ldt_eps, ldt_delta = ldt.epsilon, ldt.delta
    em_eps = known_domain_parameters(epsilon_w, delta_w, k).track_epsilon
    # split: half of ε_w (and of δ_w) selects the keys, the EM over them gets what the accountant leaves
    sel_eps, sel_delta = epsilon_w / 2, delta_w / 2
    split_em = largest_parameter(lambda e: window_epsilon(baselines.select_then_em_events(
        k=k, select_epsilon=sel_eps, select_delta=sel_delta, em_epsilon=e), delta_w), epsilon_w)
    return Calibrated(epsilon_w, delta_w, k, ldt_eps, ldt_delta, em_eps, epsilon_w, delta_w, sel_eps, sel_delta,
                      split_em)

"""Which heavy-hitter release type to run, from the evaluation's numbers (``stream-dp budget plan``).

The rule (README, "Choosing a release type"): take the cell of the evaluation grid (docs/evaluation, experiment
4: the same bounded window released by every stream-dp type and by OpenDP and PipelineDP at equal (ε_w, δ_w))
nearest to the deployment -- nearest in log scale on expected users per window, Δ (``max_keys_per_user``),
ε_w and k, exactly on the domain: none, complete (the whole catalogue public: experiment 4's known domain) or
partial (half of it public: experiment 4b) -- and recommend the stream-dp type with the highest recall@k there.
The table below is generated from docs/evaluation/peers.csv and peers_partial_domain.csv by
``python -m eval.release_choice`` (tests/unit/test_release_choice.py checks that it still matches the committed
CSVs), so it changes only when the evaluation is regenerated.

The recommendation is advice printed by the planner; it changes nothing in the config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stream_dp.release.continual_choice_table import CONTINUAL_CELLS
from stream_dp.release.release_choice_table import EVALUATED_CELLS

# evaluation method -> (release type, what to configure)
METHODS: dict[str, tuple[str, str]] = {
    "sdp_histogram": ("histogram", "releases.histogram.enabled = true"),
    "sdp_histogram_laplace": ("histogram, Laplace noise",
                              'releases.histogram.enabled = true, releases.histogram.noise = "laplace"'),
    "sdp_histogram_laplace_domain": ("histogram, Laplace noise, over the domain",
                                     'releases.histogram.noise = "laplace" with releases.histogram.domain / domain_file'),
    "sdp_histogram_domain": ("histogram over the domain",
                             "releases.histogram.enabled = true with releases.histogram.domain / domain_file"),
    "sdp_histogram_exact": ("histogram, exact-profile calibration",
                            'releases.histogram.enabled = true, releases.histogram.calibration = "exact"'),
    "sdp_histogram_exact_domain": ("histogram, exact-profile calibration, over the domain",
                                   'releases.histogram.calibration = "exact" with releases.histogram.domain / '
                                   'domain_file'),
    "sdp_known_domain": ("topk over the domain",
                         "releases.topk.domain / domain_file (full-domain Gumbel top-k, LDT only for discovery)"),
    "sdp_ldt": ("topk", "releases.topk (limited-domain top-k), the default"),
    "sdp_histogram_exact_partial": ("histogram, exact-profile calibration, with the domain",
                                    'releases.histogram.calibration = "exact" with releases.histogram.domain / '
                                    'domain_file (keys outside it need the threshold)'),
    "sdp_histogram_laplace_partial": ("histogram, Laplace noise, with the domain",
                                      'releases.histogram.noise = "laplace" with releases.histogram.domain / '
                                      'domain_file (keys outside it need the threshold)'),
    "sdp_known_domain_partial": ("topk over the domain, with discovery",
                                 "releases.topk.domain / domain_file with discovery = \"limited_domain\", discovery_share = 0.2 (LDT discovers "
                                 "keys outside the domain)"),
}


@dataclass(frozen=True)
class Recommendation:
    release_type: str
    configure: str
    method: str  # the evaluation's method name
    cell: dict[str, Any]  # the evaluated cell it was read from: users, delta_keys, epsilon_w, k, known_domain, domain
    recall: float  # recall@k of the recommended type in that cell
    best_peer: str  # "" when the peers were not run
    best_peer_recall: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"release_type": self.release_type, "configure": self.configure, "method": self.method,
                "cell": dict(self.cell), "recall": self.recall, "best_peer": self.best_peer,
                "best_peer_recall": self.best_peer_recall}


def _log_gap(a: float, b: float) -> float:
    return abs(math.log(a) - math.log(b))


def recommend(*, max_keys_per_user: int, k: int, epsilon_w: float, known_domain: bool,
              expected_users: float, complete_domain: bool = True) -> Recommendation:
    """The best stream-dp release type of the nearest evaluated cell (module docstring). With a known domain,
    ``complete_domain`` says whether it lists every key that can occur (else the partial-domain cells are read).

    >>> r = recommend(max_keys_per_user=5, k=10, epsilon_w=1.0, known_domain=True, expected_users=600)
    >>> r.cell["users"], r.cell["delta_keys"], r.cell["epsilon_w"], r.cell["k"]
    (610, 5, 1.0, 10)
    """
    for name, value in (("max_keys_per_user", max_keys_per_user), ("k", k), ("epsilon_w", epsilon_w),
                        ("expected_users", expected_users)):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and value > 0):
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
    domain = ("complete" if complete_domain else "partial") if known_domain else "none"
    cells = [c for c in EVALUATED_CELLS if c["domain"] == domain]
    cell = min(cells, key=lambda c: (_log_gap(c["users"], expected_users), _log_gap(c["delta_keys"], max_keys_per_user),
                                     _log_gap(c["epsilon_w"], epsilon_w), _log_gap(c["k"], k)))
    release_type, configure = METHODS[cell["best_method"]]
    where = {key: cell[key] for key in ("dataset", "users", "delta_keys", "epsilon_w", "k", "known_domain", "domain")}
    return Recommendation(release_type, configure, cell["best_method"], where, cell["best_recall"],
                          cell["best_peer"], cell["best_peer_recall"])


@dataclass(frozen=True)
class ContinualAdvice:
    """Whether to learn the domain from earlier releases (``releases.histogram.domain_from_released``), read from the
    evaluation's nearest continual cell (docs/evaluation, experiment 2b)."""

    turn_on: bool  # the released domain won there beyond both intervals
    cell: dict[str, Any]  # cell, users (per window), epsilon_w
    released: float  # recall@k of the histogram with a released domain there
    single: float  # recall@k of the best single-window release there
    single_method: str

    def to_dict(self) -> dict[str, Any]:
        return {"turn_on": self.turn_on, "cell": dict(self.cell), "released": self.released, "single": self.single,
                "single_method": self.single_method}


def continual_advice(*, expected_users: float, epsilon_w: float) -> ContinualAdvice | None:
    """The released-domain advice of the continual cell nearest in log scale on users per window, then ε_w (None
    before experiment 2b was run).

    >>> a = continual_advice(expected_users=1000, epsilon_w=1.0)
    >>> a is None or a.cell["epsilon_w"] == 1.0
    True
    """
    if not CONTINUAL_CELLS:
        return None
    cell = min(CONTINUAL_CELLS, key=lambda c: (_log_gap(c["users"], expected_users), _log_gap(c["epsilon_w"], epsilon_w)))
    return ContinualAdvice(bool(cell["wins"]), {k: cell[k] for k in ("cell", "users", "epsilon_w")}, cell["released"],
                           cell["best_single_recall"], cell["best_single"])

"""Experiment 4: stream-dp's release types against the real OpenDP and PipelineDP, at equal (ε_w, δ_w).

Same bounded window histogram (a user counts once per key, for at most Δ keys), same per-window guarantee.
Each method releases a set of keys (with noisy counts where it has them); the top k by noisy value (by rank
for the selection-only methods) are scored with :func:`eval.metrics.release_metrics`.

stream-dp: every row is ``runs`` calls of the library (:mod:`stream_dp.api`) -- the production calibration from
(ε_w, δ_w) (:mod:`stream_dp.release.window_budget`), the production mechanism with its exact sampler and the
record the release worker publishes -- one call per Monte-Carlo run, on the window's bounded counts:

- ``sdp_histogram``: ``api.histogram`` -- discrete Gaussian counts, threshold τ for δ_τ = δ_w/2, ρ from the zCDP
  conversion at δ′ = δ_w/2 (what the ledger charges);
- ``sdp_histogram_exact``: ``api.histogram(calibration="exact")``: σ and τ together by the thresholded
  histogram's exact privacy profile at (ε_w, δ_w) (:mod:`stream_dp.mechanisms.sparse_gaussian_profile`,
  docs/privacy.md §8c; what the ledger charges as the basic route of its ``ZCdpAndApproxDpEvent``).
  ``sdp_histogram_exact_domain``: the same with the universe as public domain (the threshold then unused);
- ``sdp_histogram_laplace``: ``api.histogram(noise="laplace")``: discrete Laplace b = Δ/ε_w, τ and the boundary
  coin for the whole δ_w (one (ε, δ) event);
- ``sdp_ldt``: ``api.topk`` (limited-domain top-k, k̄ = 2k), the default ``topk`` release;
- ``sdp_known_domain`` (known domain only; the domain is the public catalogue = the universe, so
  ``discovery_share = 0``): ``api.topk(domain=..., discovery_share=0)``, one-shot Gumbel top-k over the domain.

Peers (each calibrated by its own library to (ε_w, δ_w)):

- ``opendp_laplace_threshold``: ``opendp.measurements.make_laplace_threshold`` on the map key → count with
  ``l01inf_distance`` d_in = (Δ, Δ, 1); scale by bisection so the map's ε = ε_w, then the smallest integer
  threshold whose δ ≤ δ_w (OpenDP's own privacy map). **Its map under-states δ** (see
  :func:`opendp_laplace_true_delta`): this row is kept, labelled "as documented", but does not count for the
  verdicts of the goal (:data:`GOAL_EXCLUDED`);
- ``opendp_laplace_threshold_true_delta``: the same OpenDP measurement at the same scale, with the smallest
  threshold whose *true* δ (:func:`opendp_laplace_true_delta`, exact from OpenDP's discrete Laplace) is ≤ δ_w --
  OpenDP's Laplace threshold at the common (ε_w, δ_w), the row the verdicts use;
- ``opendp_gaussian_threshold``: ``make_gaussian_threshold`` (approximate zCDP, ``l02inf_distance``
  d_in = (Δ, √Δ, 1)) converted by OpenDP's ``make_zCDP_to_approxDP`` + ``make_fix_delta``: threshold δ =
  δ_w/2, the rest to the conversion, scale by bisection. **Its map under-states δ too** (see
  :func:`opendp_gaussian_true_delta`): it states the continuous Gaussian's tail, its noise is the discrete
  Gaussian's, heavier. Kept, labelled "as documented", not counted (:data:`GOAL_EXCLUDED`);
- ``opendp_gaussian_threshold_true_delta``: the same OpenDP measurement with the threshold whose *true* δ (the
  discrete Gaussian's tail) is ≤ δ_w/2 and the conversion given δ_w minus that true δ (OpenDP's own conversion of
  its ρ), scale by bisection -- OpenDP's Gaussian threshold at the common (ε_w, δ_w), the row the verdicts use;
- ``pipelinedp_truncated_geometric`` / ``_laplace_thresholding`` / ``_gaussian_thresholding``: PipelineDP's
  partition selection strategies (``pipeline_dp.partition_selection``, Google's C++ implementation). The
  thresholding strategies return the noisy count they thresholded (``noised_value_if_should_keep``), which
  ranks the kept keys (PipelineDP's post-aggregation thresholding). Truncated geometric only selects: as
  PipelineDP's engine does by default, half the budget selects and a Laplace count with the other half
  (scale Δ/(ε_w/2), PipelineDP's L1 sensitivity Δ·1) ranks;
- known domain only: ``pipelinedp_public_laplace`` / ``_public_gaussian``: PipelineDP with public
  partitions -- a noisy count for every domain key (Laplace Δ/ε_w; Gaussian σ from PipelineDP's
  ``compute_sigma(ε_w, δ_w, √Δ)``), top k.

Neither a release type nor a peer (known domain only; shown, never in the verdicts):

- ``candidate_joint_em_domain``: the joint exponential mechanism over the domain at pure ε_w
  (:mod:`eval.joint_topk`; Gillenwater et al. 2022) -- a mechanism private at the cell's guarantee that does not
  pay for Δ, measured where a peer runs stream-dp's own mechanism;
- ``counterfactual_known_domain_looser_peels``: ``sdp_known_domain`` at :data:`PEEL_EPSILON_FACTOR` times its
  per-peel ε, *not* private at (ε_w, δ_w) -- what an accounting of the k peels that much tighter would buy
  (the production mechanism, :func:`stream_dp.mechanisms.known_domain.known_domain_topk`, at that ε).
- ``counterfactual_histogram*_gaussian_profile``: the production histogram
  (:func:`stream_dp.mechanisms.gaussian_histogram.gaussian_histogram`) with σ from the continuous Gaussian's exact
  profile, which the ledger cannot charge.

Speed: per-key library calls are made for keys whose keep probability under the library's own law is at
least 1e-9 (PipelineDP's ``probability_of_keep``; for OpenDP from the calibrated scale and threshold); rarer
keys are left out of the input, which changes a run's output with probability ≤ 1e-9 per key. OpenDP
measurements are called once per run on the map of the remaining keys.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import multiprocessing
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from stream_dp import api
from stream_dp.mechanisms.discrete_gaussian import discrete_gaussian_tail
from stream_dp.mechanisms.gaussian_histogram import calibration_for_sigma2, gaussian_histogram
from stream_dp.mechanisms.known_domain import known_domain_topk
from stream_dp.mechanisms.laplace_histogram import calibrate_laplace_histogram
from stream_dp.release.window_budget import histogram_calibration

from eval import baselines
from eval.calibration import calibrate
from eval.data import Histogram, Stream, bounded_histogram
from eval.joint_topk import joint_topk
from eval.metrics import Estimate, release_metrics
from eval.topk import cell_rng

SDP_METHODS = ("sdp_histogram", "sdp_histogram_laplace", "sdp_ldt", "sdp_known_domain", "sdp_histogram_domain",
               "sdp_histogram_laplace_domain", "sdp_histogram_exact", "sdp_histogram_exact_domain")
PEER_METHODS = ("opendp_laplace_threshold", "opendp_laplace_threshold_true_delta", "opendp_gaussian_threshold",
                "opendp_gaussian_threshold_true_delta", "pipelinedp_truncated_geometric",
                "pipelinedp_laplace_thresholding", "pipelinedp_gaussian_thresholding",
                "pipelinedp_public_laplace", "pipelinedp_public_gaussian")
KEEP_CUTOFF = 1e-9
# Peer rows shown in every table but left out of the goal's verdicts: their library's privacy map under-states
# δ, so they do not run at the common (ε_w, δ_w) (the sound row of the same measurement replaces them).
GOAL_EXCLUDED = frozenset({"opendp_laplace_threshold", "opendp_gaussian_threshold"})
#: The per-peel ε multiplier of the counterfactual known-domain Gumbel (:func:`_known_domain_candidates`).
PEEL_EPSILON_FACTOR = 1.4
HISTOGRAM_MAX_KEYS = 1000  # releases.histogram.max_keys default


@dataclass(frozen=True)
class PeerGrid:
    epsilons: Sequence[float] = (0.1, 0.5, 1.0, 2.0)
    deltas_keys: Sequence[int] = (1, 5, 20)
    ks: Sequence[int] = (10, 50)
    delta_w: float = 1e-6
    runs: int = 200


@dataclass
class Release:
    """``runs`` releases of one method: kept positions (into ``index`` order) with noisy values (−inf: not
    kept; for rank-only methods the value is minus the rank)."""

    values: np.ndarray  # (runs, n) float, -inf where not kept
    index: np.ndarray  # key ids of the columns
    has_counts: bool


# --------------------------------------------------------------------------------------------------
# stream-dp
# --------------------------------------------------------------------------------------------------


def gaussian_profile_delta(s: float, eps: float) -> float:
    """δ(ε) of the Gaussian mechanism with sensitivity/σ = s: Φ(−ε/s + s/2) − e^ε·Φ(−ε/s − s/2) (Balle & Wang
    2018, Theorem 8 -- the exact privacy profile; log-space for small δ)."""
    from scipy.special import log_ndtr

    la, lb = log_ndtr(-eps / s + s / 2), log_ndtr(-eps / s - s / 2)
    return float(math.exp(la) * -math.expm1(eps + lb - la))


@functools.lru_cache(maxsize=None)
def gaussian_profile_rho(eps: float, delta: float) -> float:
    """The largest ρ = s²/2 whose single Gaussian mechanism is (ε, δ)-DP by its exact profile (bisection)."""
    lo, hi = 1e-9, 100.0
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if gaussian_profile_delta(math.sqrt(2 * mid), eps) <= delta else (lo, mid)
    return lo


def sdp_histogram_calibration(epsilon_w: float, delta_w: float, dk: int, *, profile: bool = False,
                              exact: bool = False) -> Any:
    """σ² and τ at (ε_w, δ_w): the release's own calibration (:func:`stream_dp.release.window_budget.
    histogram_calibration`: δ_w/2 for the threshold, δ_w/2 for the ledger's CKS20 conversion, or with ``exact`` σ
    and τ together by the exact joint profile at (ε_w, δ_w), which the ledger does charge). ``profile``: σ from
    the exact Gaussian privacy profile instead, as if the ledger could account one window's single Gaussian
    release by its profile -- a counterfactual (the continuous Gaussian's profile, the threshold still on its own
    δ_w/2), not what the ledger charges."""
    if profile:
        rho = gaussian_profile_rho(epsilon_w, delta_w / 2)
        return calibration_for_sigma2(sigma2=dk / (2 * rho), threshold_delta=delta_w / 2, max_keys_per_user=dk)
    return histogram_calibration(epsilon_w, delta_w, dk, calibration="exact" if exact else "zcdp")


Domain = bool | np.ndarray  # False: none; True: the whole universe; a bool mask over the universe: those keys


def release_support(hist: Histogram, domain: Domain) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(counts, key ids, in-domain flags) of the keys a histogram release noises: the keys present in the window
    and every key of the public ``domain`` (count 0 when absent)."""
    if domain is False:
        return hist.counts, hist.keys, np.zeros(len(hist.keys), dtype=bool)
    if domain is True:
        return hist.dense(), np.arange(hist.universe), np.ones(hist.universe, dtype=bool)
    mask = np.asarray(domain, dtype=bool)
    if mask.shape != (hist.universe,):
        raise ValueError(f"a domain mask must have one flag per key of the universe ({hist.universe}), "
                         f"got shape {mask.shape}")
    dense = hist.dense()
    index = np.flatnonzero(mask | (dense > 0))
    return dense[index], index, mask[index]


def window_counts(hist: Histogram) -> dict[int, int]:
    """The window's bounded counts as the library takes them: key id → distinct bounded users."""
    return dict(zip(hist.keys.tolist(), hist.counts.tolist()))


def domain_keys(hist: Histogram, domain: Domain) -> list[int] | None:
    """The public domain's key ids (None: no domain)."""
    if domain is False:
        return None
    _, index, in_domain = release_support(hist, domain)
    return index[in_domain].tolist()


def histogram_release(call: Callable[[np.random.Generator], list[dict[str, Any]]], hist: Histogram, domain: Domain,
                      runs: int, rng: np.random.Generator) -> Release:
    """``runs`` histogram releases (``call(rng)`` → the released items): each item's noisy count in its key's
    column, −inf for the keys a run did not release."""
    _, index, _ = release_support(hist, domain)
    column = {key: i for i, key in enumerate(index.tolist())}
    values = np.full((runs, len(index)), -np.inf)
    for r in range(runs):
        for item in call(rng):
            values[r, column[item["key"]]] = item["count"]
    return Release(values, index, True)


def sdp_histogram(hist: Histogram, dk: int, eps: float, delta: float, runs: int, rng: np.random.Generator, *,
                  domain: Domain = False, profile: bool = False, exact: bool = False) -> Release:
    """The histogram release (``api.histogram``); ``domain``: the public domain (:data:`Domain`) -- its keys are
    released whatever their noisy count, the others only at or above τ (docs/privacy.md §8, the same cost).
    ``profile``: the counterfactual calibration of :func:`sdp_histogram_calibration`, run by the production
    mechanism (it is not a release type: the library has no call for it)."""
    counts, public = window_counts(hist), domain_keys(hist, domain)
    if profile:
        cal = sdp_histogram_calibration(eps, delta, dk, profile=True)

        def call(g: np.random.Generator) -> list[dict[str, Any]]:
            result = gaussian_histogram(counts, calibration=cal, max_keys=HISTOGRAM_MAX_KEYS, domain=public or (),
                                        rng=g)
            return [{"key": row.key, "count": row.count} for row in result.rows]
    else:
        def call(g: np.random.Generator) -> list[dict[str, Any]]:
            return api.histogram(counts=counts, epsilon=eps, delta=delta, max_keys_per_user=dk,
                                 calibration="exact" if exact else "zcdp", domain=public,
                                 max_keys=HISTOGRAM_MAX_KEYS, seed=g)["items"]
    return histogram_release(call, hist, domain, runs, rng)


def sdp_histogram_laplace(hist: Histogram, dk: int, eps: float, delta: float, runs: int, rng: np.random.Generator,
                          *, domain: Domain = False) -> Release:
    """``api.histogram(noise="laplace")``: b = Δ/ε_w, τ for the whole δ_w (one (ε, δ) event: basic composition
    gives exactly (ε_w, δ_w), no conversion δ′); ``domain`` as in :func:`sdp_histogram`."""
    counts, public = window_counts(hist), domain_keys(hist, domain)

    def call(g: np.random.Generator) -> list[dict[str, Any]]:
        return api.histogram(counts=counts, epsilon=eps, delta=delta, max_keys_per_user=dk, noise="laplace",
                             domain=public, max_keys=HISTOGRAM_MAX_KEYS, seed=g)["items"]

    return histogram_release(call, hist, domain, runs, rng)


def sdp_topk(hist: Histogram, dk: int, eps: float, delta: float, k: int, runs: int, rng: np.random.Generator, *,
             domain: Domain = False, discovery_share: float = 0.0, discovery: str = "limited_domain") -> np.ndarray:
    """``runs`` calls of ``api.topk`` (k̄ = 2k; with a ``domain``, known-domain top-k with that discovery and share
    -- limited-domain discovery by default, as evaluated): released key ids (runs, k), best first, −1 padded."""
    counts, public = window_counts(hist), domain_keys(hist, domain)
    out = -np.ones((runs, k), dtype=np.int64)
    for r in range(runs):
        items = api.topk(counts=counts, epsilon=eps, delta=delta, max_keys_per_user=dk, k=k, k_bar=2 * k,
                         domain=public, discovery=discovery, discovery_share=discovery_share, seed=rng)["items"]
        out[r, :len(items)] = [item["key"] for item in items]
    return out


def known_domain_looser_peels(hist: Histogram, k: int, track_epsilon: float, runs: int, rng: np.random.Generator
                              ) -> np.ndarray:
    """The production known-domain mechanism over the universe at a given per-peel ε (no discovery) -- for the
    counterfactual row, which no window budget calibrates."""
    domain_counts = dict(zip(range(hist.universe), hist.dense().tolist()))
    out = -np.ones((runs, k), dtype=np.int64)
    for r in range(runs):
        keys = known_domain_topk(domain_counts, {}, k=k, k_bar=k, track_epsilon=track_epsilon, discover_epsilon=None,
                                 delta=0.5, max_keys_per_user=1, rng=rng).keys
        out[r, :len(keys)] = keys
    return out


def _ranked(released: np.ndarray, width: int) -> Release:
    """Key-id rows (−1 padded, best first) as a Release over those ids with value −rank."""
    ids = np.unique(released[released >= 0])
    values = np.full((len(released), max(len(ids), 1)), -np.inf)
    pos = {int(k): i for i, k in enumerate(ids)}
    for r, row in enumerate(released):
        for rank, key in enumerate(row):
            if key >= 0:
                values[r, pos[int(key)]] = -rank
    return Release(values[:, :len(ids)] if len(ids) else values[:, :0], ids, False)


# --------------------------------------------------------------------------------------------------
# OpenDP
# --------------------------------------------------------------------------------------------------


def _opendp():
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp


def _bisect_scale(ok: Callable[[float], bool], lo: float = 1e-3, hi: float = 1e6) -> float:
    """Smallest scale with ok(scale) (ok is monotone: larger scale, more privacy); relative precision ~1e-9."""
    for _ in range(36):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _smallest_threshold(delta_of: Callable[[int], float], delta: float) -> int:
    lo, hi = 1, 2
    while delta_of(hi) > delta:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if delta_of(mid) <= delta else (mid, hi)
    return hi


@functools.lru_cache(maxsize=None)
def opendp_laplace_measurement(dk: int, eps: float, delta: float) -> Any:
    dp = _opendp()
    dom = dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64))
    met = dp.l01inf_distance(dp.absolute_distance(T=dp.i64))
    d_in = (dk, dk, 1)

    def make(scale: float, threshold: int) -> Any:
        return dp.m.make_laplace_threshold(dom, met, scale=scale, threshold=threshold)

    scale = _bisect_scale(lambda s: make(s, 10**9).map(d_in)[0] <= eps)
    threshold = _smallest_threshold(lambda t: make(scale, t).map(d_in)[1], delta)
    # with the threshold fixed, a smaller scale only lowers δ: take the smallest scale that still meets ε
    scale = _bisect_scale(lambda s: make(s, threshold).map(d_in)[0] <= eps, lo=scale / 2, hi=scale)
    _OPENDP_PARAMS[("laplace", dk, eps, delta)] = (scale, threshold)
    return make(scale, threshold)


def discrete_laplace_log_tail(scale: float, t: int) -> float:
    """log P[Z ≥ t] for OpenDP's integer Laplace noise, the discrete Laplace P[Z = y] ∝ e^{−|y|/scale}
    (``tests/unit/test_eval_peers.py`` checks the law on OpenDP's own measurement): for t ≥ 1,
    P[Z ≥ t] = q^t / (1 + q) with q = e^{−1/scale}; for t ≤ 0 by symmetry, 1 − P[Z ≥ 1 − t]."""
    log_q = -1.0 / scale
    if t >= 1:
        return t * log_q - math.log1p(math.exp(log_q))
    return math.log1p(-math.exp((1 - t) * log_q - math.log1p(math.exp(log_q))))


def opendp_laplace_true_delta(scale: float, threshold: int, dk: int) -> float:
    """The true δ of ``make_laplace_threshold(scale, threshold)`` at d_in = (Δ, Δ, 1): the probability that
    some key present in only one neighbour -- at most Δ of them, each with count 1 -- is released. The
    measurement keeps a value iff count + Z ≥ threshold, so each such key is kept with p = P[Z ≥ threshold − 1]
    and δ = 1 − (1 − p)^Δ. OpenDP 0.16's map states 1 − (1 − P[Z ≥ threshold])^Δ (the key's count taken as 0,
    or a strict comparison): too small by the factor ≈ e^{1/scale} = e^{ε/Δ} (e² at Δ = 1, ε = 2)."""
    p = math.exp(discrete_laplace_log_tail(scale, threshold - 1))
    return -math.expm1(dk * math.log1p(-p)) if p < 1 else 1.0


def opendp_laplace_scale(dk: int, eps: float) -> float:
    """The smallest scale whose OpenDP map states ε ≤ ε_w at d_in = (Δ, Δ, 1) (its ε does not depend on the
    threshold: the map's ε is Δ/scale)."""
    dp = _opendp()
    dom = dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64))
    met = dp.l01inf_distance(dp.absolute_distance(T=dp.i64))
    return _bisect_scale(lambda s: dp.m.make_laplace_threshold(dom, met, scale=s, threshold=10**9)
                         .map((dk, dk, 1))[0] <= eps)


@functools.lru_cache(maxsize=None)
def opendp_laplace_true_threshold(dk: int, eps: float, delta: float) -> tuple[float, int]:
    """(scale, threshold) of the sound row: the scale of :func:`opendp_laplace_scale`, the smallest threshold
    whose true δ (:func:`opendp_laplace_true_delta`) is ≤ ``delta``."""
    scale = opendp_laplace_scale(dk, eps)
    return scale, _smallest_threshold(lambda t: opendp_laplace_true_delta(scale, t, dk), delta)


@functools.lru_cache(maxsize=None)
def opendp_laplace_true_delta_measurement(dk: int, eps: float, delta: float) -> Any:
    """OpenDP's ``make_laplace_threshold`` at the common (ε_w, δ_w) by its true δ (the threshold of
    :func:`opendp_laplace_true_threshold`); ε still by OpenDP's own map."""
    dp = _opendp()
    dom = dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64))
    met = dp.l01inf_distance(dp.absolute_distance(T=dp.i64))
    scale, threshold = opendp_laplace_true_threshold(dk, eps, delta)
    _OPENDP_PARAMS[("laplace_true_delta", dk, eps, delta)] = (scale, threshold)
    return dp.m.make_laplace_threshold(dom, met, scale=scale, threshold=threshold)


def opendp_laplace_delta_audit(grid: PeerGrid) -> list[dict[str, Any]]:
    """Per (Δ, ε_w) of ``grid``: the documented row's scale and threshold, the δ OpenDP's map states for it,
    its true δ, and the sound row's threshold and true δ (deterministic: calibrations only, no sampling)."""
    out = []
    for dk in grid.deltas_keys:
        for eps in grid.epsilons:
            documented = opendp_laplace_measurement(dk, eps, grid.delta_w)
            scale, threshold = _OPENDP_PARAMS[("laplace", dk, eps, grid.delta_w)]
            sound_scale, sound_threshold = opendp_laplace_true_threshold(dk, eps, grid.delta_w)
            stated = documented.map((dk, dk, 1))[1]
            true = opendp_laplace_true_delta(scale, threshold, dk)
            out.append({"delta_keys": dk, "epsilon_w": eps, "delta_w": grid.delta_w, "scale": scale,
                        "documented_threshold": threshold, "stated_delta": stated, "true_delta": true,
                        "understatement": true / stated, "sound_threshold": sound_threshold,
                        "sound_true_delta": opendp_laplace_true_delta(sound_scale, sound_threshold, dk)})
    return out


_OPENDP_MAKERS: dict[str, Callable[[int, float, float], Any]] = {}


def opendp_min_count(kind: str, dk: int, eps: float, delta: float) -> float:
    """Counts below this are kept by the OpenDP measurement with probability < KEEP_CUTOFF (Laplace:
    ½·e^{−(τ−c)/b}; Gaussian: P[N(0, σ²) ≥ τ − c]); the runs skip them (see the module docstring)."""
    from scipy import stats

    _OPENDP_MAKERS[kind](dk, eps, delta)
    scale, threshold = _OPENDP_PARAMS[(kind, dk, eps, delta)]  # recorded by the (cached) calibration
    if kind.startswith("laplace"):
        return threshold - scale * math.log(1 / (2 * KEEP_CUTOFF))
    return threshold - scale * float(stats.norm.isf(KEEP_CUTOFF))


_OPENDP_PARAMS: dict[tuple, tuple[float, int]] = {}


@functools.lru_cache(maxsize=None)
def opendp_gaussian_measurement(dk: int, eps: float, delta: float) -> Any:
    dp = _opendp()
    dom = dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64))
    met = dp.l02inf_distance(dp.absolute_distance(T=dp.i64))
    d_in = (dk, dk, 1)  # (L0, L2, L∞); OpenDP bounds L2 by min(L2, sqrt(L0)·L∞) = √Δ

    def make(scale: float, threshold: int) -> Any:
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(
            dp.m.make_gaussian_threshold(dom, met, scale=scale, threshold=threshold)), delta)

    def threshold_for(scale: float) -> int:
        return _smallest_threshold(
            lambda t: dp.m.make_gaussian_threshold(dom, met, scale=scale, threshold=t).map(d_in)[1], delta / 2)

    scale = _bisect_scale(lambda s: make(s, threshold_for(s)).map(d_in)[0] <= eps, lo=0.1, hi=1e5)
    threshold = threshold_for(scale)
    # threshold fixed: below this scale its δ only shrinks (more δ left to the conversion); refine the scale
    scale = _bisect_scale(lambda s: make(s, threshold).map(d_in)[0] <= eps, lo=scale / 2, hi=scale)
    _OPENDP_PARAMS[("gaussian", dk, eps, delta)] = (scale, threshold)
    return make(scale, threshold)


def opendp_gaussian_true_delta(scale: float, threshold: int, dk: int) -> float:
    """The true δ of ``make_gaussian_threshold(scale, threshold)``'s threshold at d_in = (Δ, √Δ, 1): a key present in
    only one neighbour (count 1, at most Δ of them) is kept iff 1 + Z ≥ threshold, Z OpenDP's *discrete* Gaussian
    N_Z(0, scale²) (``tests/unit/test_eval_peers.py`` measures the keep rate on OpenDP's own measurement), so
    δ_τ = 1 − (1 − P[Z ≥ threshold − 1])^Δ, P from the discrete Gaussian's pmf
    (:func:`stream_dp.mechanisms.discrete_gaussian.discrete_gaussian_tail`). OpenDP 0.16's map states the
    continuous Gaussian's tail P[N(0, scale²) ≥ threshold − 1] instead: at scale 1, threshold 3 it states 0.0228
    where the key is kept with probability 0.0586."""
    p = discrete_gaussian_tail(Fraction(scale) ** 2, threshold - 1)
    return -math.expm1(dk * math.log1p(-p)) if p < 1 else 1.0


@functools.lru_cache(maxsize=None)
def opendp_gaussian_true_delta_measurement(dk: int, eps: float, delta: float) -> Any:
    """OpenDP's ``make_gaussian_threshold`` at the common (ε_w, δ_w) by its true δ: the threshold is the smallest
    whose true δ_τ (:func:`opendp_gaussian_true_delta`) is ≤ δ_w/2; ε is OpenDP's own conversion of its ρ
    (``make_zCDP_to_approxDP`` + ``make_fix_delta``) with the δ left after the *true* δ_τ (δ_w − δ_τ, where the
    documented row leaves δ_w minus the stated one); the smallest scale meeting ε_w (bisection, as for the
    documented row). Returns the threshold measurement itself (what runs; its outputs do not depend on the
    accounting)."""
    dp = _opendp()
    d_in = (dk, dk, 1)

    def threshold_for(scale: float) -> int:
        return _smallest_threshold(lambda t: opendp_gaussian_true_delta(scale, t, dk), delta / 2)

    def epsilon_of(scale: float, threshold: int) -> float:
        measurement = _gaussian_threshold(scale, threshold)
        stated = measurement.map(d_in)[1]
        left = delta - opendp_gaussian_true_delta(scale, threshold, dk)  # for the conversion of ρ
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(measurement), left + stated).map(d_in)[0]

    scale = _bisect_scale(lambda s: epsilon_of(s, threshold_for(s)) <= eps, lo=0.1, hi=1e5)
    threshold = threshold_for(scale)
    scale = _bisect_scale(lambda s: epsilon_of(s, threshold) <= eps, lo=scale / 2, hi=scale)
    _OPENDP_PARAMS[("gaussian_true_delta", dk, eps, delta)] = (scale, threshold)
    return _gaussian_threshold(scale, threshold)


def _gaussian_threshold(scale: float, threshold: int) -> Any:
    """OpenDP's ``make_gaussian_threshold`` on a map key → i64 count, ``l02inf_distance`` (d_in = (Δ, √Δ, 1))."""
    dp = _opendp()
    dom = dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64))
    met = dp.l02inf_distance(dp.absolute_distance(T=dp.i64))
    return dp.m.make_gaussian_threshold(dom, met, scale=scale, threshold=threshold)


def opendp_gaussian_delta_audit(grid: PeerGrid) -> list[dict[str, Any]]:
    """Per (Δ, ε_w) of ``grid``: the documented Gaussian row's scale and threshold, the threshold δ OpenDP's map
    states, its true δ there, and the sound row's scale, threshold and true δ (calibrations only)."""
    out = []
    for dk in grid.deltas_keys:
        for eps in grid.epsilons:
            opendp_gaussian_measurement(dk, eps, grid.delta_w)
            opendp_gaussian_true_delta_measurement(dk, eps, grid.delta_w)
            scale, threshold = _OPENDP_PARAMS[("gaussian", dk, eps, grid.delta_w)]
            sound_scale, sound_threshold = _OPENDP_PARAMS[("gaussian_true_delta", dk, eps, grid.delta_w)]
            stated = _gaussian_threshold(scale, threshold).map((dk, dk, 1))[1]
            true = opendp_gaussian_true_delta(scale, threshold, dk)
            out.append({"delta_keys": dk, "epsilon_w": eps, "delta_w": grid.delta_w, "scale": scale,
                        "documented_threshold": threshold, "stated_delta": stated, "true_delta": true,
                        "understatement": true / stated, "sound_scale": sound_scale,
                        "sound_threshold": sound_threshold,
                        "sound_true_delta": opendp_gaussian_true_delta(sound_scale, sound_threshold, dk)})
    return out


_OPENDP_MAKERS.update(laplace=opendp_laplace_measurement, laplace_true_delta=opendp_laplace_true_delta_measurement,
                      gaussian=opendp_gaussian_measurement, gaussian_true_delta=opendp_gaussian_true_delta_measurement)


def run_opendp(meas: Any, hist: Histogram, runs: int, min_count: float = -math.inf) -> Release:
    data = {int(k): int(c) for k, c in zip(hist.keys, hist.counts) if c >= min_count}
    col = {int(k): i for i, k in enumerate(hist.keys)}
    values = np.full((runs, len(hist)), -np.inf)
    arg = opendp_input(meas, data)
    for r in range(runs):
        for key, value in meas(arg).items():
            values[r, col[int(key)]] = float(value)
    return Release(values, hist.keys, True)


def opendp_input(meas: Any, data: dict[int, int]) -> Any:
    """``data`` as the OpenDP object ``meas`` is invoked on, converted once by OpenDP's own conversion (``py_to_c``
    to the measurement's input carrier type, what ``meas(data)`` does on every call): a run then skips re-checking
    every key and count in Python (~15 % of a call on 10⁴ keys). The measurement reads its input without consuming
    it, so one object serves every run; the release and its noise are the library's, unchanged."""
    from opendp._convert import py_to_c
    from opendp._lib import AnyObjectPtr
    from opendp.core import measurement_input_carrier_type

    return py_to_c(data, c_type=AnyObjectPtr, type_name=measurement_input_carrier_type(meas))


# --------------------------------------------------------------------------------------------------
# PipelineDP
# --------------------------------------------------------------------------------------------------


def _strategy(name: str, eps: float, delta: float, dk: int) -> Any:
    import pipeline_dp
    from pipeline_dp import partition_selection

    kind = {"truncated_geometric": pipeline_dp.PartitionSelectionStrategy.TRUNCATED_GEOMETRIC,
            "laplace_thresholding": pipeline_dp.PartitionSelectionStrategy.LAPLACE_THRESHOLDING,
            "gaussian_thresholding": pipeline_dp.PartitionSelectionStrategy.GAUSSIAN_THRESHOLDING}[name]
    return partition_selection.create_partition_selection_strategy(kind, eps, delta, dk)


def _eligible(strategy: Any, counts: np.ndarray) -> np.ndarray:
    """Columns whose keep probability (the library's own) is at least KEEP_CUTOFF."""
    probs = {int(c): strategy.probability_of_keep(int(c)) for c in np.unique(counts)}
    return np.flatnonzero(np.array([probs[int(c)] >= KEEP_CUTOFF for c in counts], dtype=bool))


def run_pipelinedp_thresholding(name: str, hist: Histogram, dk: int, eps: float, delta: float, runs: int
                                ) -> Release:
    strategy = _strategy(name, eps, delta, dk)
    cols = _eligible(strategy, hist.counts)
    values = np.full((runs, len(hist)), -np.inf)
    counts = [int(c) for c in hist.counts[cols]]
    for r in range(runs):
        for j, c in zip(cols, counts):
            v = strategy.noised_value_if_should_keep(c)
            if v is not None:
                values[r, j] = float(v)
    return Release(values, hist.keys, True)


def run_pipelinedp_truncated_geometric(hist: Histogram, dk: int, eps: float, delta: float, runs: int,
                                       rng: np.random.Generator) -> Release:
    strategy = _strategy("truncated_geometric", eps / 2, delta, dk)
    cols = _eligible(strategy, hist.counts)
    values = np.full((runs, len(hist)), -np.inf)
    counts = [int(c) for c in hist.counts[cols]]
    noise_scale = dk / (eps / 2)  # PipelineDP: L1 = max_partitions_contributed · max_contributions_per_partition
    for r in range(runs):
        for j, c in zip(cols, counts):
            if strategy.should_keep(c):
                values[r, j] = c + rng.laplace(scale=noise_scale)
    return Release(values, hist.keys, True)


def run_pipelinedp_public(kind: str, hist: Histogram, dk: int, eps: float, delta: float, runs: int,
                          rng: np.random.Generator, *, domain: np.ndarray | None = None) -> Release:
    """PipelineDP with public partitions: a noisy count for every key of the domain (the universe, or the keys
    of the bool mask ``domain``); keys outside it are never released."""
    from pipeline_dp import dp_computations

    index = np.arange(hist.universe) if domain is None else np.flatnonzero(domain)
    dense = hist.dense()[index].astype(float)
    if kind == "laplace":
        noise = rng.laplace(scale=dp_computations.compute_l1_sensitivity(dk, 1) / eps, size=(runs, dense.size))
    else:
        sigma = dp_computations.compute_sigma(eps, delta, dp_computations.compute_l2_sensitivity(dk, 1))
        noise = rng.normal(scale=sigma, size=(runs, dense.size))
    return Release(dense[None, :] + noise, index, True)


# --------------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------------


def _score(rel: Release, hist: Histogram, k: int, ties: np.random.Generator) -> dict[str, Any]:
    """Precision, recall and relative error of each run's top ``k`` by released value; ties broken at random
    (``ties``, :func:`eval.baselines.topk_rows_random_ties`), the same rule for every method."""
    vals = rel.values
    cols = baselines.topk_rows_random_ties(vals, k, ties)
    released = np.where(cols >= 0, rel.index[np.maximum(cols, 0)], -1) if len(rel.index) else cols
    m = release_metrics(released, hist, k)
    kept = np.isfinite(vals)
    out = {"precision": m["precision"], "recall": m["recall"], "keys_topk": m["keys"],
           "keys_released": kept.sum(axis=1).astype(float)}
    if rel.has_counts and vals.shape[1] and len(rel.index):
        dense = hist.dense()
        truth = dense[rel.index].astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            err = np.where(kept, np.abs(vals - truth[None, :]) / np.maximum(truth[None, :], 1.0), np.nan)
        # mean relative error of the counts released among the top k, per run (NaN when none)
        top = np.take_along_axis(err, np.maximum(cols, 0), axis=1)
        top[cols < 0] = np.nan
        finite = np.isfinite(top)
        total = np.where(finite, top, 0.0).sum(axis=1)
        n = finite.sum(axis=1)
        out["rel_error"] = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    else:
        out["rel_error"] = np.full(len(vals), np.nan)
    return out


def _family(method: str) -> str:
    if method.startswith("sdp_"):
        return "stream-dp"
    return method.split("_")[0]  # opendp, pipelinedp, counterfactual, candidate


def _rows(dataset: str, dk: int, eps: float, delta: float, known: bool, method: str, rel: Release,
          hist: Histogram, ks: Iterable[int], seconds: float) -> list[dict[str, Any]]:
    rows = []
    for k in ks:
        s = _score(rel, hist, k, cell_rng(0, "ties", dataset, dk, eps, delta, known, method, k))
        row: dict[str, Any] = {"dataset": dataset, "delta_keys": dk, "epsilon_w": eps, "delta_w": delta, "k": k,
                               "known_domain": known, "method": method,
                               "family": _family(method),
                               "runs": len(rel.values)}
        for name in ("precision", "recall", "keys_released", "rel_error"):
            with np.errstate(invalid="ignore"):
                est = Estimate.of(s[name])
            row[f"{name}_mean"], row[f"{name}_ci95"] = est.mean, est.half_width
        row["empty_fraction"] = float(np.mean(s["keys_topk"] == 0))
        row["seconds"] = round(seconds, 2)
        rows.append(row)
    return rows


def peers_available() -> bool:
    """Whether the peer libraries (the ``eval`` extra: opendp, pipeline-dp) are installed."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("opendp", "pipeline_dp"))


def run_peer_experiment(datasets: Iterable[Stream], grid: PeerGrid, *, seed: int = 20261129,
                        peers: bool = True, workers: int = 1, cache: Path | None = None) -> list[dict[str, Any]]:
    """Rows: dataset × Δ × ε_w × known-domain × method × k (the selection-only peers do not depend on k or on
    the domain: they are run once per (dataset, Δ, ε_w) and scored for every k and both domain settings).
    ``workers`` > 1 runs the cells in that many processes, ``cache`` keeps finished cells (:func:`map_cells`)."""
    jobs = [(stream.name, hist, dk, eps, grid, seed, peers)
            for stream in datasets for dk in grid.deltas_keys
            for hist in (bounded_histogram(stream, dk),) for eps in grid.epsilons]
    return map_cells(_cell, jobs, workers, cache=cache)


def map_cells(cell: Callable[..., list[dict[str, Any]]], jobs: Sequence[tuple[Any, ...]], workers: int, *,
              cache: Path | None = None) -> list[dict[str, Any]]:
    """The rows of ``cell(*job)`` for every job, in the jobs' order: in this process when ``workers`` ≤ 1, else in
    a pool of ``workers`` spawned processes. A cell draws stream-dp's noise from its own generators
    (:func:`eval.topk.cell_rng`), so its rows do not depend on where it ran; the peer libraries' noise is
    unseeded either way. ``cell`` must be a module-level function (it is pickled by name). ``cache``: a directory
    keeping each finished cell's rows (:func:`cached_cell`), so an interrupted run resumes where it stopped."""
    run = functools.partial(cached_cell, cell, cache) if cache is not None else cell
    if workers <= 1 or len(jobs) <= 1:
        return [row for job in jobs for row in run(*job)]
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return [row for rows in pool.map(run, *zip(*jobs)) for row in rows]


#: Part of every cached cell's key (:func:`cell_key`): change it whenever a cell's rows would come out
#: different for the same job (the scoring rule, a method's calibration), so no cache mixes old and new rows.
ROWS_VERSION = "2-random-ties"


def cell_key(cell: Callable[..., Any], job: Sequence[Any]) -> str:
    """A file name for ``cell(*job)``: the cell's name and a digest of the job's parameters (its histograms and
    domain masks by content), so a cached cell is reused only for the same data, grid, seed and peers.

    >>> cell_key(_cell, ("movielens", 5, 1.0)) == cell_key(_cell, ("movielens", 5, 1.0))
    True
    >>> cell_key(_cell, ("movielens", 5, 1.0)) == cell_key(_cell, ("movielens", 5, 2.0))
    False
    """
    digest = hashlib.sha256(f"{cell.__module__}.{cell.__qualname__}.{ROWS_VERSION}".encode())
    for part in job:
        if isinstance(part, Histogram):
            for array in (part.keys, part.counts):
                digest.update(np.ascontiguousarray(array).tobytes())
            digest.update(str(part.universe).encode())
        elif isinstance(part, np.ndarray):
            digest.update(np.ascontiguousarray(part).tobytes())
        else:
            digest.update(repr(part).encode())
    return f"{cell.__module__}.{cell.__name__}-{digest.hexdigest()[:16]}.json"


def cached_cell(cell: Callable[..., list[dict[str, Any]]], cache: Path, *job: Any) -> list[dict[str, Any]]:
    """``cell(*job)``'s rows, read from ``cache`` when an earlier run finished this cell (:func:`cell_key`), else
    computed and written there (atomically: a cell interrupted mid-write is recomputed). The rows are JSON (str,
    int, float, bool, NaN), so they read back equal."""
    path = Path(cache) / cell_key(cell, job)
    if path.exists():
        rows: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
        return rows
    rows = cell(*job)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(rows, default=lambda value: value.item()), encoding="utf-8")  # numpy scalars
    partial.replace(path)
    return rows


def _timed(fn: Callable[[], Release]) -> tuple[Release, float]:
    t = time.perf_counter()
    rel = fn()
    return rel, time.perf_counter() - t


def _cell(name: str, hist: Histogram, dk: int, eps: float, grid: PeerGrid, seed: int, peers: bool
          ) -> list[dict[str, Any]]:
    delta, runs, ks = grid.delta_w, grid.runs, grid.ks

    def rng(*tag: Any) -> np.random.Generator:
        return cell_rng(seed, "peers", name, dk, eps, *tag)

    shared: dict[str, tuple[Release, float]] = {
        "sdp_histogram": _timed(lambda: sdp_histogram(hist, dk, eps, delta, runs, rng("hist"))),
        "sdp_histogram_laplace": _timed(lambda: sdp_histogram_laplace(hist, dk, eps, delta, runs, rng("hist-lap"))),
        "sdp_histogram_exact": _timed(lambda: sdp_histogram(hist, dk, eps, delta, runs, rng("hist-exact"),
                                                            exact=True)),
        "counterfactual_histogram_gaussian_profile": _timed(
            lambda: sdp_histogram(hist, dk, eps, delta, runs, rng("hist-profile"), profile=True))}
    if peers:
        for kind, method in (("laplace", "opendp_laplace_threshold"),
                             ("laplace_true_delta", "opendp_laplace_threshold_true_delta"),
                             ("gaussian", "opendp_gaussian_threshold"),
                             ("gaussian_true_delta", "opendp_gaussian_threshold_true_delta")):
            shared[method] = _timed(
                lambda kind=kind: run_opendp(_OPENDP_MAKERS[kind](dk, eps, delta), hist, runs,
                                             opendp_min_count(kind, dk, eps, delta)))
        shared["pipelinedp_truncated_geometric"] = _timed(
            lambda: run_pipelinedp_truncated_geometric(hist, dk, eps, delta, runs, rng("tg")))
        for kind in ("laplace_thresholding", "gaussian_thresholding"):
            shared[f"pipelinedp_{kind}"] = _timed(
                lambda kind=kind: run_pipelinedp_thresholding(kind, hist, dk, eps, delta, runs))
    rows: list[dict[str, Any]] = []
    for known in (False, True):
        for method, (rel, sec) in shared.items():
            rows += _rows(name, dk, eps, delta, known, method, rel, hist, ks, sec)
        for k in ks:
            cal = calibrate(eps, delta, k)
            t = time.perf_counter()
            if known:
                released = sdp_topk(hist, dk, eps, delta, k, runs, rng("known", k), domain=True)
                rows += _rows(name, dk, eps, delta, True, "sdp_known_domain", _ranked(released, k), hist, [k],
                              time.perf_counter() - t)
                rows += _known_domain_candidates(name, hist, dk, eps, delta, k, cal.em_epsilon, runs, rng)
            else:
                released = sdp_topk(hist, dk, eps, delta, k, runs, rng("ldt", k))
                rows += _rows(name, dk, eps, delta, False, "sdp_ldt", _ranked(released, k), hist, [k],
                              time.perf_counter() - t)
        if known:
            for method, profile in (("sdp_histogram_domain", False),
                                    ("counterfactual_histogram_domain_gaussian_profile", True)):
                rel, sec = _timed(lambda profile=profile: sdp_histogram(hist, dk, eps, delta, runs,
                                                                         rng("dom", profile), domain=True,
                                                                         profile=profile))
                rows += _rows(name, dk, eps, delta, True, method, rel, hist, ks, sec)
            rel, sec = _timed(lambda: sdp_histogram(hist, dk, eps, delta, runs, rng("dom-exact"), domain=True,
                                                    exact=True))
            rows += _rows(name, dk, eps, delta, True, "sdp_histogram_exact_domain", rel, hist, ks, sec)
            rel, sec = _timed(lambda: sdp_histogram_laplace(hist, dk, eps, delta, runs, rng("dom-lap"), domain=True))
            rows += _rows(name, dk, eps, delta, True, "sdp_histogram_laplace_domain", rel, hist, ks, sec)
        if known and peers:
            for kind in ("laplace", "gaussian"):
                rel, sec = _timed(lambda kind=kind: run_pipelinedp_public(kind, hist, dk, eps, delta, runs,
                                                                           rng("public", kind)))
                rows += _rows(name, dk, eps, delta, True, f"pipelinedp_public_{kind}", rel, hist, ks, sec)
    return rows


def _known_domain_candidates(name: str, hist: Histogram, dk: int, eps: float, delta: float, k: int,
                             em_epsilon: float, runs: int, rng: Callable[..., np.random.Generator]
                             ) -> list[dict[str, Any]]:
    """Rows that are not release types, for every known-domain cell (the report reads them where no release type
    wins strictly, e.g. where a peer runs stream-dp's own mechanism): the joint exponential mechanism at pure ε_w
    (a candidate: private at the cell's guarantee, :mod:`eval.joint_topk`), and the known-domain Gumbel at
    :data:`PEEL_EPSILON_FACTOR` times its per-peel ε -- *not* private at (ε_w, δ_w): what an accounting of the k
    peels that much tighter than the ledger's would buy."""
    rows = []
    t = time.perf_counter()
    released = joint_topk(hist, k=k, epsilon=eps, runs=runs, rng=rng("joint", k))
    rows += _rows(name, dk, eps, delta, True, "candidate_joint_em_domain", _ranked(released, k), hist, [k],
                  time.perf_counter() - t)
    t = time.perf_counter()
    released = known_domain_looser_peels(hist, k, PEEL_EPSILON_FACTOR * em_epsilon, runs, rng("known-scaled", k))
    rows += _rows(name, dk, eps, delta, True, "counterfactual_known_domain_looser_peels", _ranked(released, k),
                  hist, [k], time.perf_counter() - t)
    return rows


# --------------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------------


def counted_peer(row: dict[str, Any]) -> bool:
    """A peer library's row that the goal's verdicts count (not one of :data:`GOAL_EXCLUDED`)."""
    return row["family"] in ("opendp", "pipelinedp") and row["method"] not in GOAL_EXCLUDED


def verdict(mine: dict[str, Any], peer: dict[str, Any], metric: str = "recall") -> str:
    """"win" when ``mine``'s mean ``metric`` exceeds the peer's by more than both 95 % half-widths combined, "lose"
    in the mirror case, else "same"."""
    diff = mine[f"{metric}_mean"] - peer[f"{metric}_mean"]
    margin = mine[f"{metric}_ci95"] + peer[f"{metric}_ci95"]
    return "win" if diff > margin else ("lose" if -diff > margin else "same")


def cell_verdicts(rows: Sequence[dict[str, Any]], metric: str = "recall") -> list[dict[str, Any]]:
    """Per grid cell and peer: the best stream-dp method vs that peer on ``metric``@k (:func:`verdict`).
    ``counts_for_goal`` is False for the peers of :data:`GOAL_EXCLUDED` (shown, not
    counted: their stated δ is not their true one)."""
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["dataset"], r["delta_keys"], r["epsilon_w"], r["k"], r["known_domain"]), []).append(r)
    out = []
    for (dataset, dk, eps, k, known), group in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0]))):
        sdp = [r for r in group if r["family"] == "stream-dp"]
        if not sdp:
            continue
        best = max(sdp, key=lambda r: r[f"{metric}_mean"])
        for peer in (r for r in group if r["family"] in ("opendp", "pipelinedp")):
            out.append({"dataset": dataset, "delta_keys": dk, "epsilon_w": eps, "k": k, "known_domain": known,
                        "best_sdp": best["method"], "best_sdp_mean": best[f"{metric}_mean"],
                        "best_sdp_ci95": best[f"{metric}_ci95"], "peer": peer["method"],
                        "peer_mean": peer[f"{metric}_mean"], "peer_ci95": peer[f"{metric}_ci95"],
                        "verdict": verdict(best, peer, metric),
                        "counts_for_goal": peer["method"] not in GOAL_EXCLUDED})
    return out


def same_mechanism(best_sdp: str, peer: str, dk: int, eps: float, delta: float) -> str | None:
    """What both rows run, when the best stream-dp method and ``peer`` draw from the same noise law with the same
    parameters at (Δ, ε_w, δ_w) -- a verdict between them is then a Monte-Carlo draw, not a difference of
    mechanisms (stream-dp's runs are seeded, the peer libraries' noise is not) -- else None. The parameters are
    recomputed from both calibrations, not assumed."""
    if best_sdp == "sdp_histogram_laplace" and peer == "opendp_laplace_threshold_true_delta":
        ours = calibrate_laplace_histogram(epsilon=eps, threshold_delta=delta, max_keys_per_user=dk)
        scale, threshold = opendp_laplace_true_threshold(dk, eps, delta)
        if math.isclose(float(ours.scale), scale, rel_tol=1e-6) and ours.threshold == threshold:
            return (f"discrete Laplace of scale {scale:.4g} and threshold {threshold} on both sides (stream-dp adds a "
                    "boundary coin at the threshold − 1, which can only release more)")
    if best_sdp == "sdp_histogram_laplace_domain" and peer == "pipelinedp_public_laplace":
        from pipeline_dp import dp_computations

        ours = calibrate_laplace_histogram(epsilon=eps, threshold_delta=delta, max_keys_per_user=dk)
        theirs = dp_computations.compute_l1_sensitivity(dk, 1) / eps
        if math.isclose(float(ours.scale), theirs, rel_tol=1e-3):
            return f"Laplace of scale {theirs:.4g} on every domain key (discrete for stream-dp, continuous for PipelineDP)"
    if best_sdp == "sdp_histogram_exact_domain" and peer == "pipelinedp_public_gaussian":
        from pipeline_dp import dp_computations

        ours = math.sqrt(float(sdp_histogram_calibration(eps, delta, dk, exact=True).sigma2))
        theirs = dp_computations.compute_sigma(eps, delta, dp_computations.compute_l2_sensitivity(dk, 1))
        if math.isclose(ours, theirs, rel_tol=1e-3):
            return f"Gaussian of σ {theirs:.4g} on every domain key (discrete for stream-dp, continuous for PipelineDP)"
    return None

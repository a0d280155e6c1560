"""The record draft of each batch release type, from its mechanism's result: what subscribers read (items, the
stopped-at-⊥ flag, ``info``) and what it cost (the measurement's realized events).

One function per type, shared by the release builders (:mod:`stream_dp.release.builders`, keys as the strings
Redis holds) and the library (:mod:`stream_dp.api`, keys as the caller gave them: ``key=`` says how a key is
written into an item). The items' order and fields are the release schema's (config/release.schema.json).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from stream_dp.mechanisms.weighted_histogram import rows_in_count_units
from stream_dp.release.records import RecordDraft
from stream_dp.release.windows import Window

KeyText = Callable[[Hashable], Any]


def topk_draft(window: Window, parameters: dict[str, Any], result: Any, measurement: Any, *, key: KeyText = str,
               mechanism: str = "limited_domain_topk") -> RecordDraft:
    """Limited-domain top-k: ranked keys, whether it stopped at ⊥, the outcomes charged (pay-what-you-get)."""
    items = [{"key": key(k), "rank": i + 1} for i, k in enumerate(result.keys)]
    return RecordDraft(window, "topk", mechanism, parameters, items=items, hit_bottom=bool(result.hit_bottom),
                       events=measurement.realized(result), info={"outcomes": int(result.outcomes)})


def known_domain_parameters(calibrated: Any, *, discovery_share: float) -> dict[str, Any]:
    """Known-domain top-k's mechanism parameters (a :class:`~stream_dp.release.window_budget.KnownDomainParameters`):
    ε per tracked peel, the discovery and its share, and the discovery's own -- threshold: σ², τ and ρ_d;
    limited domain: ε per outcome -- with its δ (the threshold's or the ⊥ rule's)."""
    p: dict[str, Any] = {"delta": calibrated.delta, "track_epsilon": calibrated.track_epsilon,
                         "discovery": calibrated.discovery, "discovery_share": discovery_share}
    cal = calibrated.discovery_calibration
    if cal is not None:
        p.update({"discovery_sigma2": str(cal.sigma2), "discovery_threshold": cal.threshold,
                  "discovery_rho": cal.rho})
    elif calibrated.discover_epsilon is not None:
        p["discover_epsilon"] = calibrated.discover_epsilon
    return p


def known_domain_draft(window: Window, parameters: dict[str, Any], result: Any, measurement: Any, *,
                       domain_size: int, key: KeyText = str, domain: dict[str, Any] | None = None) -> RecordDraft:
    """Known-domain top-k: ranked keys with their ``source`` (domain or discovered) and the keys discovered;
    ``domain``: the record's block saying what the window's public domain was (the release worker's)."""
    items = [{"key": key(k), "rank": i + 1, "source": source}
             for i, (k, source) in enumerate(zip(result.keys, result.sources))]
    return RecordDraft(window, "topk", "known_domain_topk", {**parameters, "domain_size": domain_size}, items=items,
                       hit_bottom=bool(result.hit_bottom), events=measurement.realized(result),
                       info={"discovered": [key(k) for k in result.discovered]}, domain=domain)


def histogram_measurement(calibration: Any, *, noise: str, weighting: str, max_keys: int, confidence: float) -> Any:
    """The histogram measurement of a calibration (Gaussian, Laplace or per-user weighted)."""
    from stream_dp.mechanisms import GaussianHistogram, LaplaceHistogram, WeightedHistogram

    kind = (WeightedHistogram if weighting == "per_user" else LaplaceHistogram if noise == "laplace"
            else GaussianHistogram)
    return kind(calibration, max_keys=max_keys, confidence=confidence)


def histogram_parameters(cal: Any, *, noise: str, weighting: str, max_keys: int, confidence: float,
                         max_keys_per_user: int) -> dict[str, Any]:
    """The histogram record's mechanism parameters: the noise (σ² or b), threshold and its δ, cap, interval level."""
    unit = cal.unit  # per_user weighting: σ² and τ in count units (score / U)
    noise_fields = ({"noise": "discrete_laplace", "scale": str(cal.scale)} if noise == "laplace" else
                    {"noise": "discrete_gaussian", "sigma2": str(cal.sigma2 / (unit * unit)), "rho": cal.rho,
                     **({"calibration": "exact"} if cal.calibration == "exact" else {})})
    weighting_fields = {"weighting": "per_user", "weight_unit": unit} if weighting == "per_user" else {}
    return {"threshold_delta": cal.threshold_delta, "max_keys": max_keys, "confidence": confidence,
            "max_keys_per_user": max_keys_per_user, **noise_fields, **weighting_fields,
            "threshold": cal.threshold / unit if unit > 1 else cal.threshold}


def histogram_draft(window: Window, mechanism: str, parameters: dict[str, Any], result: Any, measurement: Any, *,
                    has_domain: bool, confidence: float, key: KeyText = str,
                    domain: dict[str, Any] | None = None) -> RecordDraft:
    """Histogram: ranked keys with noisy (weighted) counts and intervals; ``source`` when a domain is public;
    ``domain``: the record's block saying what the window's public domain was (the release worker's)."""
    unit = measurement.calibration.unit
    rows = rows_in_count_units(result, unit)  # weighted scores -> weighted counts (post-processing); U = 1: as is
    items = [{"key": key(k), "rank": i + 1, "count": count, "ci_low": low, "ci_high": high,
              **({"source": "domain" if in_domain else "discovered"} if has_domain else {})}
             for i, (k, count, low, high, in_domain) in enumerate(rows)]
    return RecordDraft(window, "histogram", mechanism, parameters, items=items, events=measurement.realized(result),
                       info={"above_threshold": result.above_threshold, "capped": result.capped,
                             "ci_half_width": result.ci_half_width / unit if unit > 1 else result.ci_half_width,
                             "confidence": confidence}, domain=domain)


def sample_draft(window: Window, parameters: dict[str, Any], result: Any, measurement: Any, *,
                 key: KeyText = str) -> RecordDraft:
    """Private weighted sample: sampled keys with tokens and estimates, and the parameters that rebuild them."""
    items = [{"key": key(row.key), "token": float(row.token), "estimate": float(row.estimate)} for row in result.rows]
    # the mechanism's own public parameters (incl. the estimator) let subscribers recompute estimates
    return RecordDraft(window, "sample", "private_weighted_sample", {**parameters, **result.parameters()},
                       items=items, events=measurement.realized(result), info={"sampled": len(items)})

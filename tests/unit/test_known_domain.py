"""Known-domain top-k with discovery (stream_dp/mechanisms/known_domain.py)."""

from __future__ import annotations

import pytest

from stream_dp.accounting.composition import compose
from stream_dp.config import ConfigError, config_from_mapping
from stream_dp.mechanisms.known_domain import KnownDomainTopk, domain_split, known_domain_topk


def test_without_discovery_only_domain_keys_are_released_and_no_delta_is_charged() -> None:
    r = known_domain_topk({"a": 0, "b": 0, "c": 0}, {"secret": 10**6}, k=2, k_bar=5, track_epsilon=0.1,
                          discover_epsilon=None, delta=1e-6, max_keys_per_user=1, rng=1)
    assert set(r.keys) <= {"a", "b", "c"} and len(r.keys) == 2  # zero counts are in the domain too
    assert r.sources == ("domain", "domain") and r.discovered == () and not r.hit_bottom
    (event,) = r.events
    assert (event.kind, event.count, event.delta) == ("range_bounded", 2, 0.0)


def test_the_settled_cost_never_exceeds_the_reserved_worst_case() -> None:
    reserve = compose(KnownDomainTopk(k=3, k_bar=4, track_epsilon=0.4, discover_epsilon=0.2, delta=1e-6,
                                      max_keys_per_user=2, discovery="limited_domain").privacy_map())
    for seed in range(30):
        r = known_domain_topk({"a": 5, "b": 1}, {f"o{j}": j for j in range(10)}, k=3, k_bar=4, track_epsilon=0.4,
                              discover_epsilon=0.2, delta=1e-6, max_keys_per_user=2, rng=seed)
        spent = compose(r.events)
        assert spent.rho <= reserve.rho + 1e-15 and spent.zcdp_delta <= reserve.zcdp_delta
        assert len(r.keys) == len(r.sources) <= 3
        assert all((s == "domain") == (key in {"a", "b"}) for key, s in zip(r.keys, r.sources))


def test_discovered_keys_are_ranked_with_the_domain_by_their_tracked_counts() -> None:
    r = known_domain_topk({"a": 100, "b": 50}, {"hot": 100_000, "a": 999_999}, k=3, k_bar=3, track_epsilon=50.0,
                          discover_epsilon=50.0, delta=1e-6, max_keys_per_user=1, rng=2)
    assert r.keys == ("hot", "a", "b") and r.sources == ("discovered", "domain", "domain")


def test_the_split_keeps_the_worst_case_rho_of_plain_topk() -> None:
    track, discover = domain_split(epsilon=0.1, discovery_share=0.25)
    assert track**2 + discover**2 == pytest.approx(0.1**2)
    with pytest.raises(ValueError, match="discovery_share"):
        domain_split(epsilon=0.1, discovery_share=1.0)


def test_config_names_the_domain_setting_at_fault(tmp_path) -> None:
    from stream_dp.release.builders import TopkBuilder

    missing = config_from_mapping({"releases": {"topk": {"domain_file": str(tmp_path / "missing.txt")}}},
                                  environ={})
    with pytest.raises(ConfigError, match=r"releases\.topk\.domain_file"):  # when the worker builds it
        TopkBuilder(missing)
    with pytest.raises(ConfigError, match=r"releases\.topk\.discovery_share"):
        config_from_mapping({"releases": {"topk": {"enabled": True, "domain_from_released": True,
                                                    "discovery_share": 0.0}}}, environ={})
    cfg = config_from_mapping({"releases": {"topk": {"domain": ["x"], "discovery_share": 0.0}}}, environ={})
    assert cfg.releases.topk.has_domain


def test_threshold_discovery_finds_what_limited_domain_discovery_at_a_share_cannot() -> None:
    """ε_w = 1 over k = 10 outcomes (ε ≈ 0.126 per outcome), Δ = 5: limited-domain top-k at ε·√0.2 puts its ⊥
    ~290 counts above the (k̄+1)-th count, so a key 150 users touched is never discovered; the threshold at 0.8 of
    ρ (σ² ≈ 157, τ ≈ 70) finds it in every run -- and charges the same worst-case ρ."""
    from stream_dp.mechanisms.known_domain import threshold_discovery_calibration

    eps, k, dk = 0.126, 10, 5
    cal = threshold_discovery_calibration(k=k, epsilon=eps, discovery_share=0.8, delta=5e-7, max_keys_per_user=dk)
    assert cal.threshold < 100
    threshold = KnownDomainTopk(k=k, k_bar=20, track_epsilon=eps * 0.2 ** 0.5, discover_epsilon=eps * 0.8 ** 0.5,
                                delta=5e-7, max_keys_per_user=dk, discovery="threshold", discovery_calibration=cal)
    track, discover = domain_split(epsilon=eps, discovery_share=0.2)
    ldt = KnownDomainTopk(k=k, k_bar=20, track_epsilon=track, discover_epsilon=discover, delta=5e-7,
                          max_keys_per_user=dk, discovery="limited_domain")
    outside = {"hot": 150, **{f"k{i}": 3 for i in range(40)}}
    for seed in range(20):
        found = threshold({"tracked": 20}, outside, rng=seed)
        assert "hot" in found.discovered and found.sources[found.keys.index("hot")] == "discovered"
        assert ldt({"tracked": 20}, outside, rng=seed).discovered == ()
    assert compose(threshold.privacy_map()).rho <= compose(ldt.privacy_map()).rho * (1 + 1e-12)
    with pytest.raises(ValueError, match="discovery_calibration"):
        KnownDomainTopk(k=k, k_bar=20, track_epsilon=track, discover_epsilon=discover, delta=5e-7, max_keys_per_user=dk)

"""Experiment 4b (eval/partial_domain.py): a public domain listing part of the keys."""

from __future__ import annotations

import numpy as np
import pytest

from eval import partial_domain, peers
from eval.calibration import window_epsilon
from eval.data import Histogram, bounded_histogram, zipf_stream
from eval.render_peers import section_partial_domain


@pytest.fixture(scope="module")
def hist():
    return bounded_histogram(zipf_stream(n_users=400, universe=300, exponent=1.1, events_per_user=5, seed=7), 5)


def test_the_domain_depends_on_the_seed_and_the_dataset_name_only() -> None:
    a = partial_domain.partial_domain(10_000, seed=3, dataset="movielens")
    assert np.array_equal(a, partial_domain.partial_domain(10_000, seed=3, dataset="movielens"))
    assert not np.array_equal(a, partial_domain.partial_domain(10_000, seed=3, dataset="zipf1"))
    assert not np.array_equal(a, partial_domain.partial_domain(10_000, seed=4, dataset="movielens"))
    assert abs(a.mean() - partial_domain.DOMAIN_FRACTION) < 0.03
    for bad in (0.0, 1.0, -0.5):
        with pytest.raises(ValueError, match="domain fraction"):
            partial_domain.partial_domain(10, seed=1, dataset="d", fraction=bad)


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_the_histogram_releases_every_domain_key_and_only_keys_above_tau_outside_it(hist, noise) -> None:
    domain = partial_domain.partial_domain(hist.universe, seed=1, dataset="zipf")
    if noise == "gaussian":
        rel = peers.sdp_histogram(hist, 5, 1.0, 1e-6, 40, np.random.default_rng(2), domain=domain, exact=True)
        cal = peers.sdp_histogram_calibration(1.0, 1e-6, 5, exact=True)
        lowest_outside = cal.threshold
    else:
        rel = peers.sdp_histogram_laplace(hist, 5, 1.0, 1e-6, 40, np.random.default_rng(2), domain=domain)
        cal = peers.calibrate_laplace_histogram(epsilon=1.0, threshold_delta=1e-6, max_keys_per_user=5)
        lowest_outside = cal.threshold - 1  # the boundary coin
    in_domain = domain[rel.index]
    dense = hist.dense()
    # the support: every domain key (count 0 when absent) and the present keys outside it, nothing else
    assert set(rel.index.tolist()) == set(np.flatnonzero(domain).tolist()) | set(hist.keys.tolist())
    assert (dense[rel.index[~in_domain]] > 0).all()
    assert np.isfinite(rel.values[:, in_domain]).all()  # below the cap (300 keys): every domain key, every run
    outside = rel.values[:, ~in_domain]
    assert (outside[np.isfinite(outside)] >= lowest_outside).all()
    assert np.isinf(outside).any()  # the threshold does cut keys outside the domain


def test_the_domain_masks_agree_with_the_boolean_settings(hist) -> None:
    full = peers.sdp_histogram(hist, 5, 1.0, 1e-6, 5, np.random.default_rng(9), domain=True)
    mask = peers.sdp_histogram(hist, 5, 1.0, 1e-6, 5, np.random.default_rng(9),
                               domain=np.ones(hist.universe, dtype=bool))
    assert np.array_equal(full.index, mask.index) and np.array_equal(full.values, mask.values)
    with pytest.raises(ValueError, match="one flag per key of the universe"):
        peers.sdp_histogram(hist, 5, 1.0, 1e-6, 1, np.random.default_rng(0), domain=np.ones(3, dtype=bool))


@pytest.mark.parametrize(("k", "eps", "dk"), [(10, 1.0, 5), (50, 0.5, 20), (10, 2.0, 1)])
def test_discover_then_track_is_calibrated_to_the_window_guarantee(k, eps, dk) -> None:
    """The library's known-domain top-k with discovery (what ``sdp_known_domain_partial`` calls): production's
    split ε_d² = 0.2·ε², ε_t² = 0.8·ε², and the worst case the ledger reserves lands on (ε_w, δ_w)."""
    from stream_dp.release.window_budget import known_domain_parameters

    p = known_domain_parameters(eps, 1e-6, k, partial_domain.DISCOVERY_SHARE, discovery="limited_domain",
                                max_keys_per_user=dk)
    assert p.delta == 5e-7
    assert p.discover_epsilon**2 / (p.discover_epsilon**2 + p.track_epsilon**2) == pytest.approx(0.2)
    m = p.measurement(k=k, k_bar=2 * k, max_keys_per_user=dk)
    assert m.discovery == "limited_domain"
    assert window_epsilon(m.privacy_map(), 1e-6) <= eps * (1 + 1e-9)
    assert window_epsilon(m.privacy_map(), 1e-6) == pytest.approx(eps, rel=1e-6)


def test_discover_then_track_returns_domain_keys_or_keys_present_in_the_window(hist) -> None:
    domain = partial_domain.partial_domain(hist.universe, seed=5, dataset="zipf")
    heavy = int(np.flatnonzero(~domain)[0])  # a key outside the domain far above every other count
    counts = hist.dense()
    counts[heavy] = 20_000
    window = Histogram.from_arrays(np.arange(hist.universe), counts, hist.universe)
    keys = peers.sdp_topk(window, 5, 2.0, 1e-6, 10, 30, np.random.default_rng(4), domain=domain,
                          discovery_share=partial_domain.DISCOVERY_SHARE)
    assert keys.shape == (30, 10)
    released = keys[keys >= 0].tolist()
    present = set(window.keys.tolist())
    assert all(domain[key] or key in present for key in released)
    assert (keys[:, 0] == heavy).all()  # discovered, then ranked first by the tracking step


def test_the_experiment_runs_without_the_peer_libraries_and_its_verdicts_use_the_threshold_peers(hist) -> None:
    stream = zipf_stream(n_users=400, universe=300, exponent=1.1, events_per_user=5, seed=7)
    grid = peers.PeerGrid(epsilons=(1.0,), deltas_keys=(5,), ks=(10,), runs=5)
    rows = partial_domain.run_partial_domain_experiment([stream], grid, seed=1, peers=False)
    assert {r["method"] for r in rows} == {"sdp_histogram_exact_partial", "sdp_histogram_laplace_partial",
                                           "sdp_known_domain_partial"}
    assert all(r["known_domain"] is True and r["domain"] == "partial" and 0 <= r["recall_mean"] <= 1 for r in rows)
    best = max(r["recall_mean"] for r in rows)
    peer = {**rows[0], "method": "pipelinedp_gaussian_thresholding", "family": "pipelinedp", "known_domain": False,
            "recall_mean": min(best + 0.5, 1.0), "recall_ci95": 0.0}
    ignored = {**peer, "method": "pipelinedp_public_gaussian", "known_domain": True, "recall_mean": 1.0}
    verdicts = partial_domain.partial_domain_verdicts(rows, [peer, ignored])
    assert [(v["peer"], v["best_sdp"], v["verdict"]) for v in verdicts] == [
        ("pipelinedp_gaussian_thresholding", max(rows, key=lambda r: r["recall_mean"])["method"], "lose")]
    # stream-dp's no-domain types count too: a deployment may leave its partial domain unused
    own = {**peer, "method": "sdp_histogram", "family": "stream-dp", "recall_mean": 1.0}
    (verdict,) = partial_domain.partial_domain_verdicts(rows, [peer, own])
    assert (verdict["best_sdp"], verdict["verdict"]) == ("sdp_histogram", "same")


def test_pipelinedp_public_partitions_release_domain_keys_only(hist) -> None:
    pytest.importorskip("pipeline_dp")
    domain = partial_domain.partial_domain(hist.universe, seed=2, dataset="zipf")
    rel = peers.run_pipelinedp_public("gaussian", hist, 5, 1.0, 1e-6, 4, np.random.default_rng(1), domain=domain)
    assert np.array_equal(rel.index, np.flatnonzero(domain)) and np.isfinite(rel.values).all()


def test_the_report_section_reads_the_csvs(tmp_path) -> None:
    from eval import analysis

    stream = zipf_stream(n_users=400, universe=300, exponent=1.1, events_per_user=5, seed=7)
    grid = peers.PeerGrid(epsilons=(1.0,), deltas_keys=(5,), ks=(10,), runs=5)
    rows = partial_domain.run_partial_domain_experiment([stream], grid, seed=1, peers=False)
    analysis.write_csv(tmp_path / "peers_partial_domain.csv", rows)
    text = section_partial_domain(tmp_path)
    assert "## 4b. A partial catalogue: 50% of the keys public" in text
    assert "stream-dp histogram, exact-profile calibration, partial domain + threshold" in text
    assert "Not run" in section_partial_domain(tmp_path / "absent")


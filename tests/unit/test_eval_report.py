"""The evaluation harness runs end to end at tiny scale, so the committed report cannot rot."""

from __future__ import annotations

import math

import pytest

from eval import analysis
from eval.peers import peers_available
from eval.render import headline_rows
from eval.report import continual_available, main

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("evaluation")
    assert main(["--out", str(out), "--scale", "tiny"]) == 0  # bounded by the suite's per-test timeout
    return out


def test_writes_csvs_figures_and_report(report_dir):
    rows = analysis.read_csv(report_dir / "topk.csv")
    methods = {r["method"] for r in rows}
    assert methods == {"ldt", "full_domain_em", "laplace_threshold", "laplace_then_em", "true_topk"}
    # the whole grid: 3 Δ × 4 ε × 2 k cells, LDT at 3 k̄ plus 4 other methods each
    assert len(rows) == 3 * 4 * 2 * (3 + 4)
    for r in rows:
        assert 0 <= r["recall_mean"] <= 1
        assert r["keys_mean"] <= r["k"]
    ceiling = analysis.select(rows, method="true_topk")
    assert all(r["recall_mean"] == 1.0 and r["precision_mean"] == 1.0 for r in ceiling)
    pngs = sorted(report_dir.glob("*.png"))
    assert len(pngs) >= 3
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC


def test_report_quotes_the_csv(report_dir):
    text = (report_dir / "README.md").read_text(encoding="utf-8")
    rows = analysis.read_csv(report_dir / "topk.csv")
    assert "python -m eval.report" in text
    headline = headline_rows(rows, "zipf1.1")
    assert len(headline) == 7
    for cells in headline:
        assert "| " + " | ".join(cells) + " |" in text
    for png in report_dir.glob("*.png"):
        assert f"({png.name})" in text


def test_more_budget_does_not_hurt_on_average(report_dir):
    # sanity of the whole pipeline: for each method, recall at ε_w = 2 is not far below recall at ε_w = 0.1
    rows = analysis.read_csv(report_dir / "topk.csv")
    for r in analysis.select(rows, epsilon_w=2.0):
        if r["method"] == "true_topk":
            continue
        low = analysis.select(rows, dataset=r["dataset"], delta_keys=r["delta_keys"], k=r["k"],
                              method=r["method"], epsilon_w=0.1)
        low = [x for x in low if x["k_bar"] == r["k_bar"]][0]
        slack = math.hypot(r["recall_ci95"], low["recall_ci95"]) + 1e-9
        assert r["recall_mean"] >= low["recall_mean"] - slack


def test_seed_experiments_reproduce_their_theory(report_dir):
    pws = analysis.read_csv(report_dir / "seed002_pws_gain.csv")
    quoted = [r for r in pws if r["spec_gain"] != ""]
    assert len(quoted) == 9  # Zipf(1e4, 1), no sampling, the 3 x 3 (ε, δ) grid of bench_pws.SPEC_GAINS
    for r in quoted:
        assert abs(r["gain"] - r["spec_gain"]) < 0.006  # the reference gains have two decimals
    assert all(r["gain"] >= 1 for r in pws)  # PWS never reports fewer keys than SbH
    blue = analysis.read_csv(report_dir / "seed003_blue.csv")
    assert {r["experiment"] for r in blue} == {"noisy_topk_with_measures", "svt_with_measures"}
    adaptivity = analysis.read_csv(report_dir / "seed003_adaptivity.csv")
    for r in adaptivity:
        assert r["adaptive"] >= r["svt"] - 1e-9  # adaptivity never answers fewer queries
        assert r["budget_left"] <= r["budget_left_bound"] + 1e-9


@pytest.mark.skipif(not continual_available(), reason="needs stream_dp.ingest and stream_dp.release")
def test_continual_release_went_through_every_window(report_dir):
    summary = analysis.read_csv(report_dir / "continual_summary.csv")
    windows = analysis.read_csv(report_dir / "continual_windows.csv")
    assert summary
    for s in summary:
        assert s["windows_never_released"] == 0
        assert s["windows_released_mean"] + s["windows_refused_mean"] == pytest.approx(s["windows"])
        rows = analysis.select(windows, setup=s["setup"])
        assert len(rows) == s["windows"]
        spent = [r["epsilon_spent_mean"] for r in sorted(rows, key=lambda r: r["window_index"])]
        assert all(0 <= e <= s["cap_epsilon"] + 1e-9 for e in spent)


def test_released_domain_experiment_ran_every_method_over_every_window(report_dir):
    """Experiment 2b at tiny scale: every method of every cell, windows in order, the verdicts and the section."""
    from eval.continual_domain import BEFORE, CATALOGUE, PEERS, RELEASED, SINGLE_WINDOW

    rows = analysis.read_csv(report_dir / "continual_domain.csv")
    windows = analysis.read_csv(report_dir / "continual_domain_windows.csv")
    methods = {r["method"] for r in rows}
    assert set(RELEASED) | set(BEFORE) | set(SINGLE_WINDOW) | {CATALOGUE[0]} <= methods
    assert set(PEERS) <= methods or not peers_available()
    for r in rows:
        assert 0 <= r["recall_mean"] <= 1 and r["windows"] >= 2
        assert len([w for w in windows if w["method"] == r["method"] and w["cell"] == r["cell"]
                    and w["epsilon_w"] == r["epsilon_w"]]) == r["windows"]
    (verdict,) = analysis.read_csv(report_dir / "continual_domain_verdicts.csv")
    assert verdict["best_single"] in SINGLE_WINDOW
    assert "## 2b. Continual release with a released domain" in (report_dir / "README.md").read_text()

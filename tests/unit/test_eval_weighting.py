"""Experiment 5 (eval/weighting.py): per-user weighting against the uniform histogram on the same windows."""

from __future__ import annotations

import numpy as np

from eval.render_more import findings_weighting, section_weighting
from eval.weighting import compare_weighting, hourly_stream, run_weighting_experiment, windows_of


def test_light_users_gain_and_full_users_change_nothing_but_the_grid(tmp_path):
    light = {r["method"]: r for r in compare_weighting("light", windows_of(hourly_stream(1_150), 3600)[:6],
                                                         runs=10, seed=1)}
    assert 2.0 < light["uniform"]["keys_per_user"] < 2.5
    assert light["per_user"]["recall_mean"] > light["uniform"]["recall_mean"] + 0.05
    assert light["per_user"]["keys_released_mean"] > light["uniform"]["keys_released_mean"]
    # every user on Δ = 5 distinct keys: the same release up to the scores' finer threshold grid
    users = np.repeat(np.arange(400), 5)
    keys = (np.arange(2000) * 7919 + users * 13) % 60
    full = {r["method"]: r for r in compare_weighting("full", [(users, keys)], runs=40, seed=2)}
    assert full["uniform"]["keys_per_user"] == 5.0
    gap = abs(full["per_user"]["recall_mean"] - full["uniform"]["recall_mean"])
    assert gap <= full["per_user"]["recall_ci95"] + full["uniform"]["recall_ci95"]


def test_the_report_section_and_findings_read_the_csv(tmp_path):
    from eval import analysis

    analysis.write_csv(tmp_path / "weighting.csv", run_weighting_experiment(runs=2, seed=3, hourly_users=(300,)))
    text = section_weighting(tmp_path)
    assert "| hourly day, 300 users | 2.24 |" in text and "τ = 62.19 instead of 63" in text
    (line,) = findings_weighting(tmp_path)
    assert line.startswith("- **Per-user weighting, hourly day, 300 users**")
    assert "Not run" in section_weighting(tmp_path / "missing")

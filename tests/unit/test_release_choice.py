"""The planner's release-type recommendation: the table is the committed evaluation's, the rule picks the
nearest evaluated cell, and ``stream-dp budget plan --expected-users`` prints it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.release_choice import cells_from, module_text
from stream_dp.cli import main
from stream_dp.release import release_choice_table
from stream_dp.release.release_choice import METHODS, recommend
from stream_dp.release.release_choice_table import EVALUATED_CELLS

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_is_the_committed_evaluation():
    """Regenerating from docs/evaluation gives the committed table (run ``python -m eval.release_choice``
    after ``python -m eval.report``)."""
    cells = cells_from(ROOT / "docs" / "evaluation")
    assert cells == EVALUATED_CELLS
    assert module_text(cells, "docs/evaluation/peers.csv") == Path(release_choice_table.__file__).read_text()
    assert {c["best_method"] for c in cells} <= set(METHODS)


@pytest.mark.parametrize("cell", EVALUATED_CELLS[::7], ids=lambda c: f"{c['dataset']}-{c['delta_keys']}-"
                         f"{c['epsilon_w']}-{c['k']}-{c['known_domain']}")
def test_an_evaluated_cell_recommends_its_own_best_type(cell):
    rec = recommend(max_keys_per_user=cell["delta_keys"], k=cell["k"], epsilon_w=cell["epsilon_w"],
                    known_domain=cell["known_domain"], expected_users=cell["users"])
    assert rec.method == cell["best_method"] and rec.recall == cell["best_recall"]
    assert rec.cell["dataset"] == cell["dataset"] and rec.cell["known_domain"] == cell["known_domain"]


def test_between_grid_points_the_nearest_cell_in_log_scale():
    rec = recommend(max_keys_per_user=3, k=25, epsilon_w=0.8, known_domain=False, expected_users=5000)
    # log-nearest: users 5000 → 20000 (zipf1), Δ 3 → 5, ε 0.8 → 1.0, k 25 → 50
    assert (rec.cell["users"], rec.cell["delta_keys"], rec.cell["epsilon_w"], rec.cell["k"]) == (20000, 5, 1.0, 50)
    known = recommend(max_keys_per_user=3, k=25, epsilon_w=0.8, known_domain=True, expected_users=5000)
    assert known.cell["known_domain"] is True and rec.cell["known_domain"] is False


@pytest.mark.parametrize("bad", [{"max_keys_per_user": 0}, {"k": -1}, {"epsilon_w": float("nan")},
                                 {"expected_users": True}])
def test_bad_inputs_name_the_input(bad):
    args = {"max_keys_per_user": 5, "k": 10, "epsilon_w": 1.0, "known_domain": False, "expected_users": 600, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        recommend(**args)


def test_budget_plan_prints_the_recommendation_only_when_asked(capsys: pytest.CaptureFixture[str]):
    config = str(ROOT / "config" / "stream-dp.toml")
    assert main(["budget", "plan", "--config", config]) == 0
    assert "release type for" not in capsys.readouterr().out
    assert main(["budget", "plan", "--config", config, "--expected-users", "600"]) == 0
    text = capsys.readouterr().out
    assert "release type for Δ = 5, k = 10" in text and "~600 users per window, no public domain" in text
    assert main(["budget", "plan", "--config", config, "--expected-users", "20000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommendation"]["cell"]["users"] == 20000
    assert data["recommendation"]["inputs"]["known_domain"] is False

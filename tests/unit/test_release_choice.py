"""The planner's release-type recommendation: the table is the committed evaluation's, the rule picks the
nearest evaluated cell, and ``stream-dp budget plan --expected-users`` prints it."""

from __future__ import annotations

import json
import math
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
                         f"{c['epsilon_w']}-{c['k']}-{c['domain']}")
def test_an_evaluated_cell_recommends_its_own_best_type(cell):
    rec = recommend(max_keys_per_user=cell["delta_keys"], k=cell["k"], epsilon_w=cell["epsilon_w"],
                    known_domain=cell["domain"] != "none", complete_domain=cell["domain"] == "complete",
                    expected_users=cell["users"])
    assert rec.method == cell["best_method"] and rec.recall == cell["best_recall"]
    assert rec.cell["dataset"] == cell["dataset"] and rec.cell["domain"] == cell["domain"]


def test_the_table_has_every_domain_setting_of_every_cell():
    by_domain = {d: {(c["dataset"], c["delta_keys"], c["epsilon_w"], c["k"]) for c in EVALUATED_CELLS
                     if c["domain"] == d} for d in ("none", "complete", "partial")}
    assert by_domain["none"] == by_domain["complete"] == by_domain["partial"] and by_domain["none"]
    assert all(c["known_domain"] == (c["domain"] != "none") for c in EVALUATED_CELLS)
    # with a partial domain: a type using it, or one that leaves it unused -- never one that needs it complete
    partial_types = {c["best_method"] for c in EVALUATED_CELLS if c["domain"] == "partial"}
    no_domain_types = {c["best_method"] for c in EVALUATED_CELLS if c["domain"] == "none"}
    assert partial_types <= {"sdp_histogram_exact_partial", "sdp_histogram_laplace_partial",
                             "sdp_known_domain_partial", "sdp_histogram", "sdp_histogram_laplace",
                             "sdp_histogram_exact", "sdp_ldt"}
    assert partial_types & {"sdp_histogram_exact_partial", "sdp_histogram_laplace_partial"} and no_domain_types


def test_between_grid_points_the_nearest_cell_in_log_scale():
    rec = recommend(max_keys_per_user=3, k=25, epsilon_w=0.8, known_domain=False, expected_users=5000)
    # log-nearest: users 5000 → 20000 (zipf1), Δ 3 → 5, ε 0.8 → 1.0, k 25 → 50
    assert (rec.cell["users"], rec.cell["delta_keys"], rec.cell["epsilon_w"], rec.cell["k"]) == (20000, 5, 1.0, 50)
    known = recommend(max_keys_per_user=3, k=25, epsilon_w=0.8, known_domain=True, expected_users=5000)
    assert known.cell["domain"] == "complete" and rec.cell["domain"] == "none"
    partial = recommend(max_keys_per_user=3, k=25, epsilon_w=0.8, known_domain=True, complete_domain=False,
                        expected_users=5000)
    assert partial.cell["domain"] == "partial" and partial.cell["k"] == 50


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


@pytest.mark.parametrize(("settings", "domain", "words"), [
    ({"RELEASES__HISTOGRAM__ENABLED": "true", "RELEASES__TOPK__ENABLED": "false",
      "RELEASES__HISTOGRAM__DOMAIN": '["a", "b"]'}, "partial", "a partial public domain"),
    ({"RELEASES__TOPK__DOMAIN": '["a"]'}, "partial", "a partial public domain"),
    ({"RELEASES__TOPK__DOMAIN": '["a"]', "RELEASES__TOPK__DISCOVERY_SHARE": "0"}, "complete",
     "a complete public domain"),
])
def test_budget_plan_reads_a_domain_as_complete_only_without_discovery(monkeypatch, capsys, settings, domain, words):
    for name, value in settings.items():
        monkeypatch.setenv(f"STREAM_DP_{name}", value)
    config = str(ROOT / "config" / "stream-dp.toml")
    assert main(["budget", "plan", "--config", config, "--expected-users", "600", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["recommendation"]
    assert rec["cell"]["domain"] == domain and rec["inputs"]["complete_domain"] == (domain == "complete")
    assert main(["budget", "plan", "--config", config, "--expected-users", "600"]) == 0
    assert words in capsys.readouterr().out


def test_the_continual_table_is_the_committed_evaluation():
    """The released-domain advice is read from experiment 2b's committed verdicts (``python -m eval.release_choice``)."""
    from eval.release_choice import continual_cells_from, continual_module_text
    from stream_dp.release import continual_choice_table
    from stream_dp.release.continual_choice_table import CONTINUAL_CELLS

    cells = continual_cells_from(ROOT / "docs" / "evaluation")
    assert cells == CONTINUAL_CELLS and cells
    assert continual_module_text(cells) == Path(continual_choice_table.__file__).read_text()


def test_the_continual_advice_is_its_nearest_cell_and_the_plan_prints_it(capsys: pytest.CaptureFixture[str]):
    from stream_dp.release.continual_choice_table import CONTINUAL_CELLS
    from stream_dp.release.release_choice import continual_advice

    for cell in CONTINUAL_CELLS:
        advice = continual_advice(expected_users=cell["users"], epsilon_w=cell["epsilon_w"])
        assert advice is not None and advice.cell["cell"] == cell["cell"] and advice.turn_on == cell["wins"]
        assert advice.released == cell["released"] and advice.single == cell["best_single_recall"]
    config = str(ROOT / "config" / "stream-dp.toml")
    assert main(["budget", "plan", "--config", config, "--expected-users", "1000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommendation"]["continual"]["cell"]["users"] == min(
        (c["users"] for c in CONTINUAL_CELLS), key=lambda u: abs(math.log(u / 1000)))
    assert main(["budget", "plan", "--config", config, "--expected-users", "1000"]) == 0
    assert "continual: " in capsys.readouterr().out

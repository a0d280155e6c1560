"""The dashboard's views from release records (pure; no broker)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from release_records import DAY, T0, record

from stream_dp.dashboard.app import BadParameter, parse_limit, parse_since, parse_type
from stream_dp.dashboard.board import ReleaseBoard, interval_of


def histogram(window: int, items: list[dict], **extra) -> dict:
    return {**record(window, "topk"), "release_id": f"{T0 + window * DAY}-{T0 + (window + 1) * DAY}.histogram",
            "type": "histogram", "items": items, "hit_bottom": None, **extra}


def board_of(*records: dict) -> ReleaseBoard:
    board = ReleaseBoard()
    for rec in records:
        board.add(rec)
    return board


def test_rank_changes_compare_with_the_previous_released_window_and_mark_new_keys():
    board = board_of(record(0, keys=("a", "b", "c")), record(1, status="budget_exhausted"),
                     record(2, keys=("c", "x")), record(3, keys=("b", "c", "a", "y", "x")))
    (ranking,) = board.trending()["rankings"]
    assert ranking["window"]["start"] == T0 + 3 * DAY and ranking["compared_with"]["start"] == T0 + 2 * DAY
    got = {i["key"]: (i["rank"], i["previous_rank"], i["change"], i["new"]) for i in ranking["items"]}
    assert got == {"b": (1, None, None, False),  # not in window 2, released in window 0: "back"
                   "c": (2, 1, -1, False), "a": (3, None, None, False), "y": (4, None, None, True),
                   "x": (5, 2, -3, False)}
    assert ranking["windows_before"] == 2  # the exhausted window 1 is not compared with
    assert ranking["hit_bottom"] is True


def test_an_exhausted_or_empty_latest_window_is_shown_as_such():
    board = board_of(record(0, keys=("a",)), record(1, status="budget_exhausted"))
    (ranking,) = board.trending()["rankings"]
    assert ranking["status"] == "budget_exhausted" and ranking["items"] == []
    board.add(record(2, keys=(), hit_bottom=True))
    (ranking,) = board.trending()["rankings"]
    assert ranking["status"] == "released" and ranking["items"] == [] and ranking["hit_bottom"] is True
    assert [w["status"] for w in board.timeline()] == ["empty", "budget_exhausted", "released"]


def test_histogram_records_are_rankings_by_estimate_with_their_intervals():
    board = board_of(
        record(0, keys=("a", "b")),
        histogram(0, [{"key": "a", "estimate": 10.0, "interval": [8, 12]}, {"key": "b", "estimate": 30.0,
                                                                            "interval": [25, 35]}]),
        histogram(1, [{"key": "a", "estimate": 50.0, "interval": {"lower": 40, "upper": 60}},
                      {"key": "b", "estimate": 20.0, "interval": {"low": 15, "high": 25}},
                      {"key": "z", "estimate": 5.0, "interval": [1, 9]}]))
    trending = board.trending()
    assert [r["type"] for r in trending["rankings"]] == ["topk", "histogram"]
    assert trending["window"]["start"] == T0 + DAY  # the newest of the rankings
    hist = trending["rankings"][1]
    assert [(i["key"], i["rank"], i["change"], i["new"]) for i in hist["items"]] == [
        ("a", 1, 1, False), ("b", 2, -1, False), ("z", 3, None, True)]
    assert [i["interval"] for i in hist["items"]] == [{"lower": 40.0, "upper": 60.0}, {"lower": 15.0, "upper": 25.0},
                                                      {"lower": 1.0, "upper": 9.0}]
    assert interval_of({"key": "a"}) is None and interval_of({"interval": ["x", None]}) is None


def test_a_release_with_a_domain_shows_which_keys_were_tracked_and_which_discovered():
    """A histogram learning its domain from earlier releases (docs/privacy.md §10): items carry their ``source``;
    the ranking marks each key tracked (in the domain) or discovered and passes the record's ``domain`` block on."""
    block = {"size": 1, "static": 0, "from_released": {"types": ["histogram"], "memory_windows": 4, "windows": [T0, T0],
                                                       "order": "recent", "max_keys": 1000, "candidates": 1,
                                                       "keys": 1, "digest": "0" * 32}}
    board = board_of(
        histogram(0, [{"key": "a", "rank": 1, "count": 60, "ci_low": 50, "ci_high": 70, "source": "discovered"}]),
        histogram(1, [{"key": "new", "rank": 1, "count": 80, "ci_low": 70, "ci_high": 90, "source": "discovered"},
                      {"key": "a", "rank": 2, "count": 9, "ci_low": -1, "ci_high": 19, "source": "domain"}],
                  domain=block),
        record(1, keys=("a",)))
    hist = next(r for r in board.trending()["rankings"] if r["type"] == "histogram")
    assert [(i["key"], i["tracked"]) for i in hist["items"]] == [("new", False), ("a", True)]
    assert hist["domain"] == block
    plain = next(r for r in board.trending()["rankings"] if r["type"] == "topk")
    assert plain["domain"] is None and all("tracked" not in i for i in plain["items"])


def test_budget_per_period_is_the_latest_block_and_a_burn_down_in_charge_order():
    day2 = {"scope": "2026-11-03", "epsilon_spent": 1.0, "delta_spent": 0.0, "epsilon_remaining": 9.0,
            "delta_remaining": 1e-5}
    board = board_of(record(0, spent=0.5), record(0, "alerts", spent=1.5), record(0, "sample", spent=1.0),
                     record(1, status="budget_exhausted", spent=1.5), record(2, budget=day2))
    periods = board.budget()["periods"]
    assert [p["scope"] for p in periods] == ["2026-11-03", "2026-11-02"]
    second, first = periods
    assert second["epsilon_cap"] == 10.0 and second["points"][0]["epsilon_remaining"] == 9.0  # cap = spent + left
    assert first["epsilon_spent"] == 1.5 and first["epsilon_remaining"] == 8.5 and first["releases"] == 4
    assert [p["epsilon_spent"] for p in first["points"]] == [0.5, 1.0, 1.5, 1.5]
    assert first["budget_exhausted"] == 1


def test_releases_newest_first_filtered_and_deduplicated():
    board = board_of(record(0), record(0, "alerts"), record(1), record(1, "sample"))
    assert board.add(record(1)) is False and len(board) == 4
    assert [r["release_id"].split(".")[1] for r in board.releases()] == ["topk", "sample", "topk", "alerts"]
    assert [r["window"]["start"] for r in board.releases(type="topk")] == [T0 + DAY, T0]
    assert {r["window"]["start"] for r in board.releases(since=T0 + 1)} == {T0 + DAY}
    assert len(board.releases(limit=1)) == 1


def test_the_board_keeps_the_newest_records_up_to_its_capacity():
    board = ReleaseBoard(capacity=3)
    for w in range(5):
        board.add(record(w))
    assert [r["window"]["start"] for r in board.releases()] == [T0 + 4 * DAY, T0 + 3 * DAY, T0 + 2 * DAY]


def test_query_parameters_are_validated_naming_the_parameter():
    assert parse_since("2026-11-02T00:00:00Z") == T0 and parse_since(None) is None
    assert parse_limit(None) == 100 and parse_limit("1000") == 1000 and parse_type("topk") == "topk"
    for fn, raw, name in ((parse_since, "soon", "since"), (parse_since, "-5", "since"), (parse_limit, "0", "limit"),
                          (parse_limit, "1001", "limit"), (parse_type, "nope", "type")):
        with pytest.raises(BadParameter, match=f"^{name} must be"):
            fn(raw)

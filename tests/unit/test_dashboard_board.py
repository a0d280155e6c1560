"""The dashboard's views from release records (pure; no broker)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from release_records import DAY, T0, record

from stream_dp.dashboard.app import BadParameter, parse_limit, parse_since, parse_type, parse_windows
from stream_dp.dashboard.board import ReleaseBoard
from stream_dp.dashboard.trends import interval_of


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
    assert parse_windows(None) == 12 and parse_windows("100") == 100
    for fn, raw, name in ((parse_since, "soon", "since"), (parse_since, "-5", "since"), (parse_limit, "0", "limit"),
                          (parse_limit, "1001", "limit"), (parse_type, "nope", "type"), (parse_windows, "0", "windows"),
                          (parse_windows, "101", "windows")):
        with pytest.raises(BadParameter, match=f"^{name} must be"):
            fn(raw)


def test_each_ranked_key_carries_its_rank_in_the_last_windows_oldest_first():
    board = board_of(record(0, keys=("a", "b")), record(1, keys=("b", "a")), record(2, status="budget_exhausted"),
                     record(3, keys=("c", "a")))
    (ranking,) = board.trending(windows=3)["rankings"]
    assert [(w["start"], w["status"]) for w in ranking["history_windows"]] == [
        (T0 + DAY, "released"), (T0 + 2 * DAY, "budget_exhausted"), (T0 + 3 * DAY, "released")]
    assert {i["key"]: i["history"] for i in ranking["items"]} == {"c": [None, None, 1], "a": [2, None, 2]}
    (everything,) = board.trending(windows=100)["rankings"]
    assert len(everything["history_windows"]) == 4
    assert {i["key"]: i["history"] for i in everything["items"]}["a"] == [1, 2, None, 2]


def test_rising_keys_climbed_most_since_the_previous_released_window():
    before = histogram(0, [{"key": k, "rank": n + 1, "count": 100 - 10 * n, "ci_low": 0, "ci_high": 200}
                           for n, k in enumerate("abcde")])
    now = histogram(1, [{"key": k, "rank": n + 1, "count": c, "ci_low": 0, "ci_high": 200}
                        for n, (k, c) in enumerate([("e", 90), ("x", 85), ("a", 80), ("d", 75), ("b", 40)])])
    (ranking,) = board_of(before, now).trending()["rankings"]
    got = [(x["key"], x["climb"], x["from_rank"], x["rank"], x["value_change"]) for x in ranking["rising"]]
    # e: 5 -> 1; x: not in the previous five, so it entered from 6th at best -> 2; d: 4 -> 4 is no climb
    assert got == [("e", 4, 5, 1, 30.0), ("x", 4, None, 2, None)]
    assert [i["value"] for i in ranking["items"]] == [90.0, 85.0, 80.0, 75.0, 40.0]
    first = board_of(before).trending()["rankings"][0]
    assert first["rising"] == [] and first["compared_with"] is None  # nothing to compare with yet


def test_a_release_cost_is_its_epsilon_on_its_own_and_spent_is_the_ledgers():
    """The burn-down's points carry each release's cost on its own (budget_text.release_epsilon): Σε for a
    pure or range-bounded release, ρ converted at the δ′ of its mechanism for a zCDP-only one."""
    topk = record(0, spent=0.4, cost={"events": [], "epsilon": 0.4, "delta": 1e-7, "rho": 0.005})
    hist = histogram(0, [], cost={"events": [], "epsilon": None, "delta": 1e-7, "rho": 0.0202},
                     mechanism={"name": "gaussian_histogram", "parameters": {"delta_prime": 1e-7}},
                     budget={**topk["budget"], "epsilon_spent": 2.31, "epsilon_remaining": 7.69})
    (period,) = board_of(topk, hist).budget()["periods"]
    costs = [(p["type"], round(p["cost_epsilon"], 2), p["epsilon_spent"]) for p in period["points"]]
    assert costs == [("topk", 0.4, 0.4), ("histogram", 1.0, 2.31)]
    assert period["last_window_end"] == T0 + DAY
    # seven outcomes: Σε 0.7, but ρ converts to less at the budget's δ′, which the dashboard's config gives
    seven = record(0, spent=0.64, cost={"events": [], "epsilon": 0.7, "delta": 1e-7, "rho": 0.00875})
    board = ReleaseBoard(delta_prime=1e-7)
    board.add(seven)
    (point,) = board.budget()["periods"][0]["points"]
    assert round(point["cost_epsilon"], 2) == 0.64 and board_of(seven).budget()["periods"][0]["points"][0][
        "cost_epsilon"] == 0.7


def test_rising_counts_climbs_within_the_top_twenty_so_a_long_list_does_not_drown_it():
    """A histogram over a large domain releases 1,000 keys: a key hopping from rank 900 to rank 2 entered the
    top 20 (climb 21 - 2 = 19), it did not climb 898 places past keys that hardly moved."""
    keys = [f"k{n}" for n in range(1000)]
    before = histogram(0, [{"key": k, "rank": n + 1, "count": 1000 - n, "ci_low": 0, "ci_high": 2000}
                           for n, k in enumerate(keys)])
    order = [keys[0], keys[899], *keys[1:3], keys[30], *keys[3:20]]
    now = histogram(1, [{"key": k, "rank": n + 1, "count": 1000 - n, "ci_low": 0, "ci_high": 2000}
                        for n, k in enumerate(order)])
    (ranking,) = board_of(before, now).trending()["rankings"]
    got = [(x["key"], x["climb"], x["from_rank"], x["rank"]) for x in ranking["rising"]]
    assert got == [("k899", 19, None, 2), ("k30", 16, None, 5)]

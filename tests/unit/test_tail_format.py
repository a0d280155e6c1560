"""Rendering release records as text (what `stream-dp tail` and the demo print)."""

from __future__ import annotations

from stream_dp.tail import budget_bar, decode, format_release, table

BASE = {"schema_version": 1, "window": {"start": 1793577600, "end": 1793581200}, "status": "released",
        "hit_bottom": False, "cost": {"epsilon": 0.5, "delta": 1e-6, "events": []},
        "budget": {"scope": "2026-11-02", "epsilon_spent": 1.0, "delta_spent": 1e-6,
                   "epsilon_remaining": 9.0, "delta_remaining": 9e-6}}


def test_alerts_show_above_first_with_estimates_and_bounds():
    rec = {**BASE, "release_id": "a.alerts", "type": "alerts", "mechanism": {"name": "adaptive_svt", "parameters": {}},
           "items": [{"key": "12", "above": False, "estimate": None},
                     {"key": "318", "above": True, "estimate": 154.2, "lower_bound": 131.0, "branch": "top"}]}
    text = format_release(rec)
    assert "1 of 2 watched keys above the threshold" in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "estimate" in line)
    assert "318" in lines[header + 2] and "154.2" in lines[header + 2] and "131" in lines[header + 2]
    assert "–" in lines[header + 3]  # no estimate for a below-threshold answer
    assert "opened" not in text
    opened = format_release({**rec, "info": {"instance": 2, "opened": True}})
    assert "SVT instance 2 opened in this window" in opened
    empty = format_release({**rec, "items": [], "info": {"watchlist_size": 0}})
    assert "no watched keys yet" in empty


def test_sample_is_summarised():
    items = [{"key": str(i), "token": i % 3, "estimate": float(i)} for i in range(40)]
    text = format_release({**BASE, "release_id": "s", "type": "sample", "items": items,
                           "mechanism": {"name": "private_weighted_sample", "parameters": {"scheme": "pps"}}})
    assert "40 sampled keys, estimated total 780" in text
    assert "… 35 more" in text
    assert text.index(" 39 ") < text.index(" 38 ")  # largest estimates first


def test_budget_exhausted_and_status_records():
    rec = {**BASE, "release_id": "x.topk", "type": "topk", "status": "budget_exhausted", "items": [],
           "mechanism": {"name": "limited_domain_topk", "parameters": {"k": 10}}}
    text = format_release(rec, color=True)
    assert "budget_exhausted" in text and "not released" in text and "\033[31m" in text
    assert "[██░░" in text  # 1.0 of 10.0 spent


def test_plain_items_get_ranks_and_unknown_fields_still_render():
    rec = {"type": "argmax", "items": ["318"], "mechanism": "large_margin", "future_field": {"x": 1}}
    text = format_release(rec)
    assert "rank  key" in text and "318" in text


def test_helpers():
    assert budget_bar(0, 0, width=4) == "[░░░░]"
    assert budget_bar(5, 0, width=4) == "[████]"
    assert table([]) == []
    assert decode(b"[1]") is None and decode(b"{bad") is None and decode('{"a": 1}') == {"a": 1}


def test_cost_and_spent_read_as_everywhere_else():
    """One meaning and one precision (stream_dp.budget_text): cost is the release's ε on its own -- a
    zCDP-only histogram's ρ converted at its δ′ -- and spent is the period's ε after it."""
    rec = {**BASE, "release_id": "h", "type": "histogram", "items": [],
           "cost": {"epsilon": None, "delta": 1e-7, "rho": 0.0202, "events": []},
           "mechanism": {"name": "gaussian_histogram", "parameters": {"delta_prime": 1e-7}},
           "budget": {"scope": "2026-11-28", "epsilon_spent": 3.1689, "epsilon_remaining": 6.8311,
                      "epsilon_cap": 10.0, "delta_spent": 4e-7, "delta_remaining": 9.6e-6}}
    last = format_release(rec).splitlines()[-1]
    assert last.startswith("  cost ε 1.00 δ 1.0e-07 · budget [") and last.endswith(
        "] 2026-11-28: ε 3.17 spent of 10.00, 6.83 left"), last

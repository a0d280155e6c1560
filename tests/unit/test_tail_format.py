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


def test_a_first_release_costs_what_its_period_has_then_spent():
    """Cost and spent are the same accounting: the first release of a period (seven top-k outcomes at ε 0.1)
    costs the ε the ledger reports for the period after it -- 0.64, not Σε = 0.70 (the issue's example)."""
    from stream_dp.accounting.budget import reported_epsilon
    from stream_dp.accounting.composition import compose
    from stream_dp.accounting.events import RangeBoundedEvent
    from stream_dp.budget_text import epsilon_text, release_epsilon

    events = [RangeBoundedEvent(epsilon=0.1, count=7, delta=1e-7, mechanism="limited_domain_topk")]
    spent = reported_epsilon(compose(events), 1e-7)  # what the ledger writes into budget.epsilon_spent
    total = compose(events)
    rec = {**BASE, "release_id": "t", "type": "topk", "items": [], "hit_bottom": True,
           "mechanism": {"name": "limited_domain_topk", "parameters": {"k": 10}},
           "cost": {"epsilon": total.basic_epsilon, "delta": 1e-7, "rho": total.rho, "events": []},
           "budget": {"scope": "2026-11-02", "epsilon_spent": spent, "epsilon_remaining": 10 - spent,
                      "epsilon_cap": 10.0, "delta_spent": 2e-7, "delta_remaining": 9.8e-6}}
    assert release_epsilon(rec, 1e-7) == spent < total.basic_epsilon
    last = format_release(rec, delta_prime=1e-7).splitlines()[-1]
    assert f"cost ε {epsilon_text(spent)} " in last and f"ε {epsilon_text(spent)} spent of 10.00" in last, last
    assert "cost ε 0.64" in last


def test_a_histogram_reads_count_first_with_its_interval_and_says_where_its_keys_come_from():
    items = [{"key": f"k{i}", "rank": i + 1, "count": 500 - 10 * i, "ci_low": 480 - 10 * i, "ci_high": 520 - 10 * i,
              "source": "domain"} for i in range(20)]
    rec = {**BASE, "release_id": "h", "type": "histogram", "items": items,
           "mechanism": {"name": "gaussian_histogram", "parameters": {}},
           "info": {"above_threshold": 20, "capped": False, "ci_half_width": 20, "confidence": 0.95}}
    lines = format_release(rec).splitlines()
    assert lines[1] == "  20 keys with a noisy count, all domain keys; intervals ±20 at 95%; the largest:"
    assert lines[2].split() == ["rank", "key", "count", "ci_low", "ci_high"]
    assert lines[4].split() == ["1", "k0", "500", "480", "520"] and "… 5 more" in lines[-2]
    mixed = format_release({**rec, "items": [items[0], {**items[1], "source": "discovered"}]})
    assert "source" in mixed.splitlines()[2] and "all domain" not in mixed

"""The Grafana dashboard imports into any Grafana and asks only for what the workers export.

- **Imports anywhere**: no data source uid is written in it; every panel and query reads the ``datasource``
  variable (type prometheus), whose value on import is the ``DS_PROMETHEUS`` input (``__inputs``), and which
  falls back to the default Prometheus when provisioned (compose provisions it as the default).
- **Checked against the metrics catalogue** (the README's, itself checked against the workers' registries by
  test_readme.py): every metric a query names is in the catalogue, every label it groups or matches by is one
  of that metric's labels, and every label value it matches is one the catalogue lists.
- **The panels operators need** for the alert rules' subjects -- dead letters by reason, window-shard fill,
  failed commits, duplicates, rebalances -- and budget panels that show the current and previous period only
  (instant queries of the two periods the release worker keeps; test_budget_metrics.py bounds the series).

(test_prometheus_dashboard.py runs every query against a real Prometheus scraping a running demo.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "config" / "grafana" / "dashboards" / "stream-dp.json").read_text())
README = (ROOT / "README.md").read_text()
# series Prometheus itself makes, and their labels
BUILTIN = {"up": {"job", "instance"},
           "ALERTS": {"alertname", "alertstate", "service", "severity", "job", "instance", "scope", "dependency"}}
TARGET_LABELS = {"job", "instance"}  # every scraped series carries them
NAME = re.compile(r"(?<![\w{,\"])(stream_dp_[a-z0-9_]+|up|ALERTS)\b(?!\s*[=!~(])")


def catalogue() -> dict[str, dict[str, set[str] | None]]:
    """metric → {label → its listed values (None: any, e.g. the budget scope)} from the README's table."""
    start = README.index("\n## Metrics\n")
    section = README[start:README.index("\n## ", start + 1)]
    out: dict[str, dict[str, set[str] | None]] = {}
    for row in re.findall(r"^\| `(stream_dp_[^|]+)\| (\w+) \| ([^|]*) \|", section, flags=re.M):
        names_cell, _kind, labels_cell = row
        names = re.findall(r"`?(stream_dp_\w+|_\w+)`?", "`" + names_cell)
        base = names[0]
        full = [base] + [base.rsplit("_", 1)[0] + n for n in names[1:]]
        labels: dict[str, set[str] | None] = {}
        for part in labels_cell.split(";"):
            m = re.match(r"\s*`(\w+)`(:\s*(.*))?", part)
            if m:
                labels[m.group(1)] = {v.strip() for v in m.group(3).split(",")} if m.group(3) else None
        for name in full:
            out[name] = {**labels, **({"le": None} if name.endswith("_bucket") else {})}
    return out


CATALOGUE = catalogue()


def panels() -> list[dict]:
    return [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def targets() -> list[tuple[str, dict]]:
    return [(p["title"], t) for p in panels() for t in p.get("targets", [])]


def test_the_catalogue_parses():
    assert len(CATALOGUE) >= 40
    assert CATALOGUE["stream_dp_release_releases_total"]["outcome"] == {"budget_exhausted", "released", "republished"}
    assert CATALOGUE["stream_dp_budget_epsilon_spent"] == {"scope": None}


def test_the_dashboard_names_no_data_source_of_its_own():
    text = json.dumps(DASHBOARD)
    (variable,) = [v for v in DASHBOARD["templating"]["list"] if v["type"] == "datasource"]
    assert variable["name"] == "datasource" and variable["query"] == "prometheus"
    (inp,) = DASHBOARD["__inputs"]
    assert inp["type"] == "datasource" and inp["pluginId"] == "prometheus"
    assert variable["current"]["value"] == "${%s}" % inp["name"]  # what Grafana's import fills in
    assert {r["id"] for r in DASHBOARD["__requires"]} >= {"grafana", "prometheus"} | {p["type"] for p in panels()}
    for p in panels():
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
    uids = set(re.findall(r'"uid": "([^"]*)"', text)) - {DASHBOARD["uid"]}
    assert uids == {"${datasource}"}, uids


def test_every_query_asks_for_metrics_labels_and_values_of_the_catalogue():
    checked = 0
    for title, target in targets():
        expr = target["expr"]
        names = set(NAME.findall(expr))
        assert names, (title, expr)
        known = {n: ({k: None for k in BUILTIN[n]} if n in BUILTIN else CATALOGUE.get(n)) for n in names}
        missing = [n for n, labels in known.items() if labels is None]
        assert not missing, f"{title}: {missing} not in the README's metrics catalogue"
        for name, body in re.findall(r"(stream_dp_\w+|up|ALERTS)\{([^}]*)\}", expr):
            for label, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', body):
                allowed = known[name] | dict.fromkeys(TARGET_LABELS)  # type: ignore[operator]
                assert label in allowed, f"{title}: {name} has no label {label}"
                values = allowed[label]
                if values is not None:
                    wanted = set(value.split("|")) if op in ("=~", "!~") else {value}
                    assert wanted <= values, f"{title}: {name}{{{label}}} takes {sorted(values)}, not {value}"
        grouped = {lb.strip() for clause in re.findall(r"\bby\s*\(([^)]*)\)", expr) for lb in clause.split(",")}
        offered = set(TARGET_LABELS).union(*(set(labels) for labels in known.values()))  # type: ignore[arg-type]
        assert grouped - {""} <= offered, f"{title}: groups by {grouped - offered} that no metric of it has"
        checked += 1
    assert checked == len(targets()) >= 40
    print(f"\n{len(panels())} panels, {checked} queries checked against {len(CATALOGUE)} catalogued metrics")


def test_panels_for_delivery_and_the_alert_rules_subjects():
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels()}
    assert re.search(r"by \(reason\) \(rate\(stream_dp_ingest_events_rejected_total", exprs["Dead letters by reason"])
    wanted = {"shard fill": r"stream_dp_ingest_shard_fill_ratio",
              "failed commits": r"stream_dp_ingest_commits_failed_total",
              "duplicates": r"stream_dp_ingest_events_duplicate_total",
              "rebalances": r"by \(change\) \(rate\(stream_dp_ingest_rebalances_total"}
    for what, pattern in wanted.items():
        assert any(re.search(pattern, e) for e in exprs.values()), what


def test_budget_panels_show_the_current_and_previous_period_only():
    budget = [(p, t) for p in panels() for t in p["targets"] if "stream_dp_budget_" in t["expr"]]
    assert len(budget) >= 3
    for panel, target in budget:
        # an instant query of the two periods the release worker exports (a range over days would draw one
        # dead line per period that has been dropped since)
        assert panel["type"] in ("gauge", "stat", "bargauge"), panel["title"]
        assert target.get("instant") is True and target.get("range") is False, panel["title"]
        assert "by (scope)" in target["expr"] and target["legendFormat"] == "{{scope}}", panel["title"]

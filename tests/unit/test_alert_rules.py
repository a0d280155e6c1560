"""The shipped alerting rules: valid, unit-tested with `promtool test rules` (each fault raises its alert,
a healthy hour raises none), loaded by compose's Prometheus, each with a runbook line in the README, and
shown on the Grafana dashboard. The promtool tests skip when promtool is missing (Debian ``prometheus``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "config" / "prometheus"
RULES = RULES_DIR / "alerts.yml"
TESTS = RULES_DIR / "alerts_test.yml"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (Debian package prometheus)")


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_the_rules_cover_what_an_operator_must_hear_about():
    names = {r["alert"] for r in alerts()}
    assert names == {"StreamDpIngestDown", "StreamDpIngestStalled", "StreamDpConsumerLagGrowing",
                     "StreamDpWatermarkStuck", "StreamDpWindowsWaitingForRelease", "StreamDpReleaseDown",
                     "StreamDpReleaseFailures", "StreamDpDeadLetterRate", "StreamDpDeadLettersLost",
                     "StreamDpBudgetNearlySpent", "StreamDpDependencyDown", "StreamDpWindowShardNearCapacity",
                     "StreamDpWindowShardFull"}
    for rule in alerts():
        assert rule["labels"]["service"] == "stream-dp" and rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_alert_has_a_unit_test_that_fires_it_and_a_healthy_test_that_does_not():
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t.get("exp_alerts")}
    silent = {t["alertname"] for t in tests[0]["alert_rule_test"] if t["exp_alerts"] == []}
    names = {r["alert"] for r in alerts()}
    assert fired == names and silent == names


def test_every_alert_has_a_runbook_line_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("\n### Alerts and runbook\n")
    section = readme[start:readme.index("\n## ", start)]
    for rule in alerts():
        assert re.search(rf"^\| `{rule['alert']}` \|", section, re.M), f"{rule['alert']} has no runbook line"


def test_compose_prometheus_loads_the_rules_and_the_dashboard_shows_them():
    prom = yaml.safe_load((ROOT / "config" / "prometheus.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in compose["services"]["prometheus"]["volumes"]
                  if v.startswith("./"))
    assert mounts["./config/prometheus/alerts.yml"] in prom["rule_files"]
    dash = json.loads((ROOT / "config" / "grafana" / "dashboards" / "stream-dp.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert any("ALERTS{" in e and 'alertstate="firing"' in e for e in exprs)


@needs_promtool
def test_promtool_checks_and_unit_tests_the_rules():
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    res = subprocess.run(["promtool", "test", "rules", str(TESTS)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


@needs_promtool
@pytest.mark.parametrize("broken", [
    ("for: 5m\n        labels: {severity: critical", "labels: {severity: critical"),  # stalled: no `for`
    ("> 0.8", "> 0.9"),  # budget: a later threshold
    ('up{job="stream-dp-ingest"} == 0 or absent(up{job="stream-dp-ingest"})', 'up{job="stream-dp-ingest"} == 0'),
])
def test_the_unit_tests_catch_a_broken_rule(tmp_path, broken):
    old, new = broken
    text = RULES.read_text()
    assert old in text
    (tmp_path / "alerts.yml").write_text(text.replace(old, new, 1))
    shutil.copy(TESTS, tmp_path / "alerts_test.yml")
    res = subprocess.run(["promtool", "test", "rules", str(tmp_path / "alerts_test.yml")], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode != 0, f"a broken rule passed the tests: {new!r}"

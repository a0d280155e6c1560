"""Live metrics of a running demo: `promtool check metrics` is clean, and every PromQL expression of the
Grafana dashboard returns data from a real Prometheus scraping the workers.

Skips when Prometheus / promtool are not installed (Debian package ``prometheus``; CI may not have it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from stream_dp.processes import free_port
from waiting import wait_for

try:
    from demo_helpers import DemoProcess, assert_nothing_left
except ImportError:  # tests/ became a package
    from .demo_helpers import DemoProcess, assert_nothing_left  # type: ignore[no-redef]

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "config" / "grafana" / "dashboards"
JOBS = {"stream-dp-ingest": 0, "stream-dp-release": 1}  # job → offset from the demo's metrics port


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


@pytest.fixture(scope="module")
def running_demo(tmp_path_factory):
    """A demo with two windows released, serving /metrics on known ports; stopped with Ctrl-C afterwards."""
    workdir = tmp_path_factory.mktemp("demo") / "work"
    port = free_port()  # the release worker gets port + 1, or a free port if that is taken
    demo = DemoProcess(["--metrics-port", str(port), "--days", "28", "--duration", "600"], workdir)
    try:
        demo.wait_for(lambda out: demo.windows_printed() >= 3, timeout=240, what="three released windows")
        ports = {}
        for line in demo.lines:
            for name in ("ingest", "release"):
                if line.startswith(f"{name} worker") and "metrics http://" in line:
                    ports[name] = int(line.split("metrics http://127.0.0.1:")[1].split("/")[0])
        assert set(ports) == {"ingest", "release"}, demo.output[:2000]
        yield demo, ports
    finally:
        if demo.proc.poll() is None:
            demo.ctrl_c()
            try:
                demo.wait(timeout=90)
            finally:
                if demo.proc.poll() is None:
                    demo.kill_all()
        assert_nothing_left(demo)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_check_metrics_is_clean(running_demo):
    _demo, ports = running_demo
    for name, port in ports.items():
        text = _get(f"http://127.0.0.1:{port}/metrics")
        assert b"stream_dp_" in text
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), (
            f"{name}: {res.stdout.decode()} {res.stderr.decode()}")


def dashboard_targets() -> list[tuple[str, str]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((f"{path.stem}: {panel['title']} [{target['refId']}]", target["expr"]))
    return out


def wait_for_rule_evaluations(base: str, timeout: float = 30) -> list[dict]:
    """Every alerting rule of the loaded rule files, once each has been evaluated at least once."""
    def evaluated() -> list[dict]:
        groups = json.loads(_get(f"{base}/api/v1/rules?type=alert"))["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(not r.get("lastEvaluation", "").startswith("0001") for r in rules) else []

    return wait_for(evaluated, timeout=timeout, interval=0.5, what="every alerting rule to be evaluated")


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (Debian package prometheus)")
def test_every_dashboard_query_returns_data(running_demo, tmp_path):
    _demo, ports = running_demo
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(ROOT / "config" / "prometheus" / "alerts.yml")],
              "scrape_configs": [{"job_name": job, "static_configs": [
                  {"targets": [f"127.0.0.1:{ports[job.removeprefix('stream-dp-')]}"]}]} for job in JOBS]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    web = free_port()
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{web}"

    def query(expr: str) -> list:
        body = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert body["status"] == "success", body
        return body["data"]["result"]

    try:
        def scraped() -> bool:  # ready, and at least 5 scrapes of each worker
            try:
                counts = query("count_over_time(up[5m])")
            except OSError:
                return False
            return len(counts) == len(JOBS) and all(float(r["value"][1]) >= 5 for r in counts)

        wait_for(scraped, timeout=60, interval=0.5, what="Prometheus to scrape both workers 5 times", procs=[prom])
        assert all(float(r["value"][1]) == 1 for r in query("up")), "both workers are up"
        targets = dashboard_targets()
        assert len(targets) >= 25
        empty = []
        for title, expr in targets:
            promql = expr.replace("$__rate_interval", "5m").replace("$__interval", "5m").replace("$__range", "5m")
            if not query(promql):
                empty.append(f"{title}: {promql}")
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
        # the alerting rules evaluate cleanly against the workers' real metrics
        rules = wait_for_rule_evaluations(base)
        assert len(rules) >= 11
        broken = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
        assert not broken, "alerting rules failing on real metrics:\n" + "\n".join(broken)
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=30)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        log.close()

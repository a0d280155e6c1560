"""Live metrics of a running demo: `promtool check metrics` is clean, and every PromQL expression of the
Grafana dashboard returns data from a real Prometheus scraping the workers; the budget series stay two per
metric through 30 budget periods.

Skips when Prometheus / promtool are not installed (Debian package ``prometheus``; CI may not have it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

from datetime import date, timedelta

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server

from stream_dp.processes import free_port
from stream_dp.release.metrics import ReleaseMetrics
from waiting import wait_for

try:
    from demo_helpers import DemoProcess, assert_nothing_left
except ImportError:  # tests/ became a package
    from .demo_helpers import DemoProcess, assert_nothing_left  # type: ignore[no-redef]

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "config" / "grafana" / "dashboards"
JOBS = {"stream-dp-ingest": 0, "stream-dp-release": 1}  # job → offset from the demo's metrics port
BUDGET_METRICS = ("stream_dp_budget_epsilon_spent", "stream_dp_budget_epsilon_remaining", "stream_dp_budget_delta_spent",
                  "stream_dp_budget_delta_remaining")


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


class Prometheus:
    """A real Prometheus scraping ``targets`` (job → port on 127.0.0.1) every second, with the alert rules."""

    def __init__(self, tmp_path: Path, targets: dict[str, int]) -> None:
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(ROOT / "config" / "prometheus" / "alerts.yml")],
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                                     for job, port in targets.items()]}
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        web = free_port()
        self.log = open(tmp_path / "prometheus.log", "wb")
        self.proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                      f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{web}"
        self.jobs = len(targets)

    def query(self, expr: str, at: float | None = None) -> list:
        """An instant query, evaluated now or at the Unix time ``at``."""
        params = {"query": expr} | ({} if at is None else {"time": repr(at)})
        body = json.loads(_get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode(params)))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_scraped(self, times: int = 5) -> None:
        def scraped() -> bool:  # ready, and at least `times` scrapes of each target
            try:
                counts = self.query("count_over_time(up[5m])")
            except OSError:
                return False
            return len(counts) == self.jobs and all(float(r["value"][1]) >= times for r in counts)

        wait_for(scraped, timeout=60, interval=0.5, what=f"Prometheus to scrape every target {times} times",
                 procs=[self.proc])

    def wait_all_up(self) -> float:
        """A moment at which the latest scrape of every target succeeded (``up`` = 1), as a Unix time to
        evaluate queries at. A scrape that fails (a 1 s timeout on a loaded 2-core CI machine) marks the
        target's series stale, so an instant query made just after it finds no data; queries at this
        moment see the last good scrape whatever comes after."""
        def all_up() -> float | None:
            up = self.query("up")
            ok = len(up) == self.jobs and all(float(r["value"][1]) == 1 for r in up)
            return float(up[0]["value"][0]) if ok else None

        return wait_for(all_up, timeout=60, interval=0.5, what="every target's latest scrape to succeed (up = 1)",
                        procs=[self.proc])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def as_promql(expr: str) -> str:
    return expr.replace("$__rate_interval", "5m").replace("$__interval", "5m").replace("$__range", "5m")


# The test without the demo comes first: the module-scoped demo starts at its first user and runs until the
# module's last test ends, so a test after the demo's would keep it replaying (and using the CPU) for nothing.
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (Debian package prometheus)")
def test_budget_series_stay_two_per_metric_over_thirty_periods(tmp_path):
    """The release worker's metrics (ReleaseMetrics, served like a worker's /metrics) go through 30 budget
    periods while a real Prometheus scrapes them: at the end each stream_dp_budget_* metric has two series
    (current and previous period), and each budget panel of the Grafana dashboard shows two. Prometheus keeps
    the history of the periods dropped on the way (each ended by a staleness marker), which a range query over
    the whole run still counts -- the instant queries the panels make do not."""
    registry = CollectorRegistry()
    metrics = ReleaseMetrics(registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    prom = Prometheus(tmp_path, {"stream-dp-release": port})
    days = [(date(2026, 11, 2) + timedelta(days=d)).isoformat() for d in range(30)]
    try:
        prom.wait_scraped(1)
        for day in days:
            for spent in (0.5, 1.5, 3.2):
                metrics.budget(day, epsilon_spent=spent, epsilon_remaining=10 - spent, delta_spent=2e-7,
                               delta_remaining=9.8e-6)
            wait_for(lambda d=day: prom.query(f'stream_dp_budget_epsilon_spent{{scope="{d}"}}'), timeout=30,
                     interval=0.2, what=f"a scrape of period {day}", procs=[prom.proc])
        wait_for(lambda: len(prom.query("stream_dp_budget_epsilon_spent")) == 2, timeout=30, interval=0.2,
                 what="the dropped period's series to go stale", procs=[prom.proc])
        per_metric = {name: len(prom.query(name)) for name in BUDGET_METRICS}
        panels = {title: len(prom.query(as_promql(expr))) for title, expr in dashboard_targets()
                  if "stream_dp_budget_" in expr}
        kept = {r["metric"]["scope"] for r in prom.query("stream_dp_budget_epsilon_spent")}
        seen = prom.query("count(count_over_time(stream_dp_budget_epsilon_spent[1h]))")
        print(f"\nafter {len(days)} periods: series per metric {per_metric}; budget panels {panels}; "
              f"periods with a series in the TSDB over the run: {seen[0]['value'][1]}")
        assert per_metric == dict.fromkeys(BUDGET_METRICS, 2)
        assert kept == set(days[-2:])
        assert panels and set(panels.values()) == {2}, panels
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_check_metrics_is_clean(running_demo):
    _demo, ports = running_demo
    for name, port in ports.items():
        text = _get(f"http://127.0.0.1:{port}/metrics")
        assert b"stream_dp_" in text
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), (
            f"{name}: {res.stdout.decode()} {res.stderr.decode()}")


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (Debian package prometheus)")
def test_every_dashboard_query_returns_data(running_demo, tmp_path):
    _demo, ports = running_demo
    prom = Prometheus(tmp_path, {job: ports[job.removeprefix("stream-dp-")] for job in JOBS})
    try:
        prom.wait_scraped()
        at = prom.wait_all_up()  # both workers are up
        targets = dashboard_targets()
        assert len(targets) >= 40
        empty = [f"{title}: {as_promql(expr)}" for title, expr in targets if not prom.query(as_promql(expr), at)]
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
        print(f"\n{len(targets)} dashboard queries, each with data from the running demo")
        # the alerting rules evaluate cleanly against the workers' real metrics
        rules = wait_for_rule_evaluations(prom.base)
        assert len(rules) >= 11
        broken = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
        assert not broken, "alerting rules failing on real metrics:\n" + "\n".join(broken)
    finally:
        prom.stop()

"""docker-compose.yml, the Dockerfile, Prometheus and Grafana provisioning, checked statically.

There is no Docker engine on the build machines, so these tests load the YAML/JSON and check what a
`docker compose up` would trip over: services and images, KRaft, healthchecks and depends_on conditions,
ports, volumes, and that every file the stack mounts or builds from exists. The dashboard's PromQL is
syntax-checked with promtool (skipped if promtool is absent) and evaluated against a live demo in
tests/integration/test_prometheus_dashboard.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stream_dp.config import config_from_mapping, load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DASHBOARD_DIR = ROOT / "config" / "grafana" / "dashboards"
WORKERS = ("ingest", "release")


def test_the_stack_has_every_component():
    assert set(SERVICES) == {"kafka", "topics", "redis", "ingest", "release", "replay", "tail",
                             "prometheus", "grafana"}
    images = {name: svc.get("image", "") for name, svc in SERVICES.items()}
    assert images["kafka"].startswith("apache/kafka:4.1.")  # Apache Kafka 4.1, as the dev stack runs
    assert images["redis"].startswith("redis:")
    assert images["prometheus"].startswith("prom/prometheus:")
    assert images["grafana"].startswith("grafana/grafana:")
    for name in (*WORKERS, "replay", "tail", "topics"):
        assert SERVICES[name]["build"] == "." and images[name] == "stream-dp:local"
    for name, image in images.items():
        assert ":latest" not in image and (not image or ":" in image), f"{name} pins its image tag"


def test_kafka_runs_kraft_single_node_without_zookeeper():
    env = SERVICES["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{node}@kafka:9093"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1
    assert not any("ZOOKEEPER" in key for key in env)
    listeners = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert listeners["PLAINTEXT"] == "kafka:9092"
    assert SERVICES["ingest"]["environment"]["STREAM_DP_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"


def test_topics_are_made_by_the_topic_contract_and_never_by_the_broker():
    """``stream-dp topics create`` on the workers' config makes the three topics (kafka.events_partitions
    partitions for scale-out, unlimited events retention ...); the broker makes none on a client's request."""
    topics = SERVICES["topics"]
    assert topics["command"] == ["stream-dp", "topics", "create", "--config", "/etc/stream-dp/stream-dp.toml"]
    assert topics["environment"] == SERVICES["ingest"]["environment"]  # the same broker, the same settings
    assert topics["volumes"] == SERVICES["ingest"]["volumes"] and topics["restart"] == "no"
    assert load_config(None, environ={}).kafka.events_partitions >= 2, "events needs several partitions"
    assert SERVICES["kafka"]["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_healthchecks_and_depends_on_conditions():
    valid = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, svc in SERVICES.items():
        for target, spec in (svc.get("depends_on") or {}).items():
            assert target in SERVICES, f"{name} depends on unknown {target}"
            assert spec["condition"] in valid
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[target], f"{name} waits for {target} to be healthy; it has no check"
            if spec["condition"] == "service_completed_successfully":
                assert SERVICES[target].get("restart") == "no", f"{target} must be one-shot"
    for name in ("kafka", "redis", "prometheus", "grafana"):
        assert SERVICES[name]["healthcheck"]["test"], name
    for name in (*WORKERS, "replay"):
        deps = SERVICES[name]["depends_on"]
        assert deps["topics"]["condition"] == "service_completed_successfully"
        assert deps["redis"]["condition"] == "service_healthy"
    assert SERVICES["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert SERVICES["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    assert SERVICES["replay"]["restart"] == "no"


def test_redis_keeps_the_ledger_across_restarts():
    command = SERVICES["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "always"
    assert any(v.endswith(":/data") for v in SERVICES["redis"]["volumes"])


def test_published_ports_are_unique_and_workers_scale():
    published = []
    for name, svc in SERVICES.items():
        for mapping in svc.get("ports", []):
            host, container = str(mapping).rsplit(":", 1)[0].split(":")[-1], str(mapping).rsplit(":", 1)[1]
            published.append(int(host))
            assert container.isdigit()
        if name in WORKERS:
            assert "ports" not in svc, f"{name} publishes no host port so it can be scaled out"
    assert len(published) == len(set(published))
    # locked down (issue 16): Grafana is the only published port, on the host's loopback
    assert set(published) == {3000}


# --------------------------------------------------------------------------------------------------
# Lockdown (issue 16): the trusted boundary of docs/privacy.md §7
# --------------------------------------------------------------------------------------------------


def _required_variable(value: str) -> str:
    """The host variable a compose value requires (``${NAME:?message}``), or fail."""
    match = re.fullmatch(r"\$\{([A-Z_]+):\?[^}]+\}", str(value))
    assert match, f"{value!r} must be a required variable ${{NAME:?message}}, never a literal secret"
    return match.group(1)


def test_redis_requires_a_password_and_is_not_published():
    redis_svc = SERVICES["redis"]
    assert "ports" not in redis_svc, "Redis (raw user ids, counts, the ledger) must not be published to the host"
    command = redis_svc["command"]
    password_var = _required_variable(command[command.index("--requirepass") + 1])
    assert _required_variable(redis_svc["environment"]["REDISCLI_AUTH"]) == password_var  # the healthcheck
    for name in (*WORKERS, "replay", "tail"):
        env = SERVICES[name]["environment"]
        assert _required_variable(env["STREAM_DP_REDIS__PASSWORD"]) == password_var, name
        assert "@" not in env["STREAM_DP_REDIS__URL"], "the password goes in redis.password, not the URL"
    assert "--protected-mode" not in command or command[command.index("--protected-mode") + 1] != "no"


def test_kafka_has_no_unauthenticated_host_listener():
    kafka = SERVICES["kafka"]
    assert "ports" not in kafka
    env = kafka["environment"]
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    for listener in env["KAFKA_ADVERTISED_LISTENERS"].split(","):
        name, address = listener.split("://")
        host = address.rsplit(":", 1)[0]
        assert host not in ("localhost", "127.0.0.1", "0.0.0.0", ""), f"{name} is advertised to the host"
        assert protocols[name] in ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT", "SSL")
        if host not in ("kafka",):  # anything reachable beyond the compose network must authenticate
            assert protocols[name].startswith("SASL"), name


def test_metrics_stay_on_the_compose_network():
    assert "ports" not in SERVICES["prometheus"]
    for name in WORKERS:
        assert "ports" not in SERVICES[name] and SERVICES[name]["expose"]


def test_grafana_has_no_anonymous_access_and_binds_loopback():
    grafana = SERVICES["grafana"]
    env = grafana["environment"]
    assert str(env.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env
    assert str(env["GF_USERS_ALLOW_SIGN_UP"]).lower() == "false"
    _required_variable(env["GF_SECURITY_ADMIN_PASSWORD"])
    assert all(str(p).startswith("127.0.0.1:") for p in grafana["ports"])


def test_no_literal_secret_anywhere_in_the_compose_file():
    text = (ROOT / "docker-compose.yml").read_text()
    for line in text.splitlines():
        if re.search(r"PASSWORD|requirepass|AUTH:", line) and not line.lstrip().startswith("#"):
            assert "${" in line or "--requirepass\"," in line.replace(" ", ""), line


def _bind_mounts():
    for name, svc in SERVICES.items():
        for volume in svc.get("volumes", []):
            source, target = volume.split(":")[:2]
            yield name, source, target


def test_every_mounted_file_exists_and_named_volumes_are_declared():
    declared = set(COMPOSE.get("volumes") or {})
    seen = set()
    for name, source, _target in _bind_mounts():
        if source.startswith((".", "/")):
            assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
            seen.add(source)
        else:
            assert source in declared, f"{name} uses undeclared volume {source}"
    assert {"./config/prometheus.yml", "./config/grafana/provisioning", "./config/grafana/dashboards",
            "./config/stream-dp.toml"} <= seen


def test_the_dockerfile_builds_from_files_that_exist():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for source in re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, flags=re.M):
        for part in source.split():
            assert (ROOT / part).exists(), f"Dockerfile copies {part}, which does not exist"
    assert "pip install ." in dockerfile, "a regular install (the default config ships as package data)"
    port = load_config(None, environ={}).metrics.port
    assert f"EXPOSE {port}" in dockerfile


def test_worker_commands_use_the_mounted_config_and_known_subcommands():
    from stream_dp.cli import build_parser

    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    mounted = {target for name, _s, target in _bind_mounts() if name == "ingest"}
    for name in (*WORKERS, "replay", "tail"):
        command = SERVICES[name]["command"]
        config = command[command.index("--config") + 1]
        assert config in mounted
        if command[0] == "stream-dp":
            assert command[1] in subcommands, f"{name} runs unknown subcommand {command[1]}"
        else:
            assert command[:3] == ["python", "-m", f"workers.{name}"]
            assert importlib.util.find_spec(f"workers.{name}") is not None, f"workers/{name}.py"
            assert name in subcommands, f"stream-dp {name} runs the same worker"


def test_compose_environment_is_a_valid_config():
    env = SERVICES["ingest"]["environment"]
    assert all(key.startswith("STREAM_DP_") for key in env)
    cfg = config_from_mapping({}, environ={k: str(v) for k, v in env.items()})
    assert cfg.redis.url == "redis://redis:6379/0" and cfg.redis.password  # auth: the required variable
    assert cfg.metrics.port == 9108
    # the default binds loopback; Prometheus scrapes over the compose network, so compose binds every address
    assert load_config(None, environ={}).metrics.host == "127.0.0.1" and cfg.metrics.host == "0.0.0.0"


def test_prometheus_scrapes_every_worker_on_its_metrics_port():
    mounted = next(s for n, s, t in _bind_mounts() if n == "prometheus" and t.endswith("prometheus.yml"))
    prom = yaml.safe_load((ROOT / mounted).read_text())
    port = int(SERVICES["ingest"]["environment"]["STREAM_DP_METRICS__PORT"])
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    for worker in WORKERS:
        sd = jobs[f"stream-dp-{worker}"]["dns_sd_configs"][0]
        assert sd["names"] == [worker] and sd["port"] == port and sd["type"] == "A"
        assert str(port) in SERVICES[worker]["expose"]


def test_grafana_is_provisioned_with_the_datasource_and_dashboards():
    mounts = {target: source for n, source, target in _bind_mounts() if n == "grafana"}
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    (ds,) = datasources
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((provisioning / "dashboards" / "stream-dp.yml").read_text())["providers"]
    path = providers[0]["options"]["path"]
    assert mounts[path] == "./config/grafana/dashboards"
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / mounts[path] / Path(home).name).exists()
    # the dashboards read the `datasource` variable (test_grafana_dashboard.py), which a provisioned dashboard
    # (no import, so no DS_PROMETHEUS input) resolves to the default Prometheus: this one
    assert ds["isDefault"] is True
    for dashboard in DASHBOARD_DIR.glob("*.json"):
        for panel in json.loads(dashboard.read_text())["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


# --------------------------------------------------------------------------------------------------
# The dashboard
# --------------------------------------------------------------------------------------------------


def dashboard_expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every dashboard."""
    out = []
    for dashboard in sorted(DASHBOARD_DIR.glob("*.json")):
        for panel in json.loads(dashboard.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((panel["title"], target["expr"]))
    return out


def test_dashboard_has_the_panels_operators_need():
    dash = json.loads((DASHBOARD_DIR / "stream-dp.json").read_text())
    assert dash["uid"] == "stream-dp"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    text = " ".join(f"{t} {e}" for t, e in dashboard_expressions())
    for needle in ("stream_dp_budget_epsilon_spent", "stream_dp_budget_epsilon_remaining",
                   "stream_dp_release_releases_total", "by (type, outcome)", "stream_dp_release_bottom_stops_total",
                   "stream_dp_svt_answers_total", "stream_dp_svt_instance_epsilon_total",
                   "stream_dp_ingest_events_consumed_total", "stream_dp_ingest_consumer_lag_records",
                   "stream_dp_ingest_events_rejected_total", "stream_dp_ingest_events_late_total",
                   "stream_dp_ingest_events_bounded_total", "stream_dp_release_publish_latency_seconds_bucket"):
        assert needle in text, needle
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["description"], f"panel {panel['title']} explains itself"
            x, w = panel["gridPos"]["x"], panel["gridPos"]["w"]
            assert 0 <= x and x + w <= 24


def promql_for_prometheus(expr: str, rate_interval: str = "1m") -> str:
    """Replace Grafana's interval variables so Prometheus can evaluate the expression."""
    return (expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)
            .replace("$__range", rate_interval))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_dashboard_promql_parses(tmp_path):
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": promql_for_prometheus(expr)}
        for i, (_title, expr) in enumerate(dashboard_expressions())]}]}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules, allow_unicode=True))
    res = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr

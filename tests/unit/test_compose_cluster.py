"""docker-compose.cluster.yml (the `cluster` profile), checked statically like docker-compose.yml: six
cluster-enabled Redis nodes with the single node's safety settings, a one-shot `redis-cli --cluster create`
with one replica per master, and every stream-dp process configured for the cluster and WAIT."""

from __future__ import annotations

from pathlib import Path

import yaml

from stream_dp.config import config_from_mapping

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
CLUSTER = yaml.safe_load((ROOT / "docker-compose.cluster.yml").read_text())
SERVICES = CLUSTER["services"]
NODES = ("redis", "redis-2", "redis-3", "redis-4", "redis-5", "redis-6")
PROCESSES = ("ingest", "release", "replay", "tail")


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_six_cluster_nodes_keep_the_single_nodes_safety_settings():
    base_command = BASE["redis"]["command"]
    for name in NODES:
        svc = SERVICES[name]
        cmd = svc["command"]
        assert svc["image"] == BASE["redis"]["image"]
        assert _flag(cmd, "--cluster-enabled") == "yes"
        assert _flag(cmd, "--cluster-config-file").startswith("/data/")  # kept on the node's volume
        for setting in ("--appendonly", "--appendfsync", "--maxmemory-policy"):
            assert _flag(cmd, setting) == _flag(base_command, setting), (name, setting)
        assert _flag(cmd, "--requirepass") == _flag(cmd, "--masterauth")  # replicas authenticate to masters
        assert "STREAM_DP_REDIS_PASSWORD" in _flag(cmd, "--requirepass")
        assert "ports" not in svc  # the compose network only
        assert svc["healthcheck"]["test"]
        (volume,) = svc["volumes"]
        assert volume.endswith(":/data")
    assert len({SERVICES[n]["volumes"][0].split(":")[0] for n in NODES}) == len(NODES)  # a volume each
    for name in NODES[1:]:
        assert SERVICES[name]["profiles"] == ["cluster"]
        assert SERVICES[name]["volumes"][0].split(":")[0] in CLUSTER["volumes"]


def test_the_init_job_creates_three_masters_with_a_replica_each_once():
    init = SERVICES["redis-cluster-init"]
    assert init["profiles"] == ["cluster"] and init["restart"] == "no"
    assert {name: spec["condition"] for name, spec in init["depends_on"].items()} == {
        n: "service_healthy" for n in NODES}
    script = "\n".join(init["command"])
    assert "--cluster create" in script and "--cluster-replicas 1" in script and "--cluster-yes" in script
    assert all(host in script for host in NODES)
    assert "cluster_state:ok" in script  # skips an existing cluster, waits for a healthy new one


def test_every_process_runs_in_cluster_mode_with_wait():
    for name in PROCESSES:
        assert name in BASE
        env = {**BASE[name]["environment"], **SERVICES[name]["environment"]}
        assert SERVICES[name]["depends_on"]["redis-cluster-init"]["condition"] == "service_completed_successfully"
        settings = {k: v for k, v in env.items() if k.startswith("STREAM_DP_") and "${" not in str(v)}
        cfg = config_from_mapping({}, environ={**settings, "STREAM_DP_REDIS__PASSWORD": "x"})
        assert cfg.redis.cluster is True
        assert cfg.redis.min_replicas_acked == 1
        assert cfg.redis.url.startswith("redis://redis:")  # any node: the cluster client discovers the rest

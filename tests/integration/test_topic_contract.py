"""The topic contract on a real broker: each way a topic can break it, and what ``stream-dp topics check``
and the worker that uses the topic say (exit code 2, one line naming the topic, the config and the fix).

Each case makes the service's topics with ``stream-dp topics create``, except the one topic it breaks,
which it makes by hand as an operator (or a broker's defaults) would. ``-s`` prints the table of
docs/topics.md.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from ingest_helpers import REPO, config_mapping, write_toml
from stream_dp import topics
from stream_dp.config import config_from_mapping

pytestmark = pytest.mark.integration

KAFKA_DEFAULT_RETENTION = "604800000"  # 7 days

#: (case, role broken, partitions, replication factor, configs of the broken topic, extra [kafka] settings,
#: the config the line must name)
CASES = [
    ("missing", "events", None, 1, {}, {}, "the topic"),
    ("made by the broker's defaults (1 partition)", "events", 1, 1, {}, {}, "the partition count"),
    ("7-day retention (Kafka's default)", "events", 4, 1, {"retention.ms": KAFKA_DEFAULT_RETENTION}, {},
     "retention.ms"),
    ("a size limit", "events", 4, 1, {"retention.bytes": str(1 << 30)}, {}, "retention.bytes"),
    ("compacted", "events", 4, 1, {"cleanup.policy": "compact"}, {}, "cleanup.policy"),
    ("broker time stamps", "events", 4, 1, {"message.timestamp.type": "LogAppendTime"}, {},
     "message.timestamp.type"),
    ("more in-sync replicas than replicas", "events", 4, 1, {"min.insync.replicas": "2"}, {},
     "min.insync.replicas"),
    ("fewer replicas than configured", "events", 4, 1, {}, {"replication_factor": 3, "min_insync_replicas": 1},
     "the replication factor"),
    ("dead-letter topic missing", "dead-letter", None, 1, {}, {}, "the topic"),
    ("releases message limit under release_message_max_bytes", "releases", 1, 1,
     {"max.message.bytes": "1048588"}, {"release_message_max_bytes": 2_000_000}, "max.message.bytes"),
]


def _worker(role: str) -> str:
    return "workers.release" if role == "releases" else "workers.ingest"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_broken_topic_is_named_with_its_config_and_fix_by_check_and_worker(
        bootstrap_servers, broker_kind, redis_url, topic_name, tmp_path, case):
    name, role, partitions, rf, broken_configs, kafka_extra, setting = case
    events = topic_name("events")
    data = config_mapping(bootstrap_servers, redis_url, events, group=topic_name("g"), size=60, max_keys=3)
    data["kafka"].update({"releases_topic": topic_name("releases"), "events_partitions": 4, **kafka_extra})
    cfg_file = write_toml(tmp_path / "c.toml", data)
    kafka = config_from_mapping(data, environ={}).kafka
    broken = {"events": kafka.events_topic, "dead-letter": kafka.dead_letter_topic,
              "releases": kafka.releases_topic}[role]
    if broker_kind == "tansu" and "min.insync.replicas" in broken_configs:
        pytest.skip("Tansu has no replicas and keeps min.insync.replicas as given; Apache Kafka refuses none "
                    "either, and the Kafka variant checks the line")
    ok_roles = tuple(r for r in topics.ROLES if r != role)
    topics.create(config_from_mapping({**data, "kafka": {**data["kafka"], "replication_factor": 1,
                                                         "min_insync_replicas": 1}}, environ={}).kafka, ok_roles)
    if partitions is not None:  # made by hand: unlimited retention unless that is what the case breaks, so
        # that the one setting broken is the first the worker names (the check lists every breach)
        configs = broken_configs if partitions == 1 and not broken_configs or "retention.ms" in broken_configs \
            else {"retention.ms": "-1", **broken_configs}
        admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 2})
        admin.create_topics([NewTopic(broken, partitions, rf, config=configs)])[broken].result()

    check = subprocess.run([sys.executable, "-m", "stream_dp.cli", "topics", "check", "--config", str(cfg_file)],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    worker = subprocess.run([sys.executable, "-m", _worker(role), "--config", str(cfg_file)], cwd=REPO,
                            capture_output=True, text=True, timeout=90)

    breach_lines = [line for line in check.stderr.splitlines() if line.startswith(f"topic {broken!r}: {setting}")]
    assert check.returncode == 2, check.stderr
    assert len(breach_lines) == 1 and "; " in breach_lines[0], check.stderr  # topic, config, then the fix
    worker_errors = [line for line in worker.stdout.splitlines() + worker.stderr.splitlines() if " ERROR " in line]
    assert worker.returncode == 2, worker.stdout + worker.stderr
    assert len(worker_errors) == 1 and f"topic {broken!r}: {setting}" in worker_errors[0], worker_errors
    assert "Traceback" not in worker.stdout + worker.stderr
    print(f"\n| {role}: {name} | `{breach_lines[0]}` | {_worker(role)}: exit {worker.returncode}, "
          f"`{worker_errors[0].split(': ', 1)[1]}` |")

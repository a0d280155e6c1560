"""stream_dp.client against the real broker: de-duplication, the schema-version check, the start points,
a consumer group resuming after a restart, and the 10-line consumer of docs/consuming.md as a process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from release_records import produce, record
from stream_dp.client import InvalidReleaseRecord, ReleaseSubscriber, UnsupportedSchemaVersion, subscribe

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def ids(records) -> list[str]:
    return [r["release_id"] for r in records]


def test_a_republished_release_is_yielded_once_and_malformed_messages_are_reported(bootstrap_servers, topic_name):
    topic = topic_name("releases")
    a, b, c = record(0), record(0, "alerts"), record(1)
    bad_schema = record(2)
    del bad_schema["cost"]
    produce(bootstrap_servers, topic, [a, b, a, b"not json", bad_schema, c, a])  # `a` republished twice
    rejected = []
    got = list(subscribe(bootstrap_servers, topic, on_invalid=rejected.append, idle_timeout=3))
    assert ids(got) == ids([a, b, c])
    assert got[0] == a
    assert [type(e) for e in rejected] == [InvalidReleaseRecord, InvalidReleaseRecord]
    assert "message is not JSON" in str(rejected[0]) and f"{topic}/0@3" in str(rejected[0])
    assert "does not follow the release schema" in str(rejected[1]) and "'cost' is a required property" in str(rejected[1])
    assert rejected[1].release_id == bad_schema["release_id"]
    # a type filter keeps only those types
    assert ids(subscribe(bootstrap_servers, topic, types=["alerts"], on_invalid=lambda e: None,
                         idle_timeout=3)) == ids([b])


def test_a_record_of_an_unknown_schema_version_is_refused_with_a_clear_error(bootstrap_servers, topic_name):
    topic = topic_name("releases")
    newer = record(1, schema_version=2, shiny_new_field=True)
    produce(bootstrap_servers, topic, [record(0), newer])
    got = []
    with pytest.raises(UnsupportedSchemaVersion) as info:
        for rec in subscribe(bootstrap_servers, topic, idle_timeout=10):
            got.append(rec)
    assert ids(got) == ids([record(0)])  # everything before it was delivered
    message = str(info.value)
    assert newer["release_id"] in message and "schema_version 2" in message
    assert "reads schema_version 1 only" in message and "upgrade stream-dp" in message
    assert f"{topic}/0@1" in message


def test_start_now_skips_what_was_published_before(bootstrap_servers, topic_name):
    topic = topic_name("releases")
    produce(bootstrap_servers, topic, [record(0), record(1)])
    sub = ReleaseSubscriber(bootstrap_servers, topic, start="now")
    try:
        assert sub.poll(timeout_ms=1000) == []  # assigned at the end of the topic
        produce(bootstrap_servers, topic, [record(1), record(2)])  # record(1) republished: new to this reader
        got: list[dict] = []
        for rec in sub.records(idle_timeout=3):
            got.append(rec)
        assert ids(got) == ids([record(1), record(2)])
    finally:
        sub.close()


@pytest.mark.slow
def test_a_consumer_group_resumes_after_a_restart_at_least_once(bootstrap_servers, topic_name):
    topic, group = topic_name("releases"), topic_name("downstream")
    first = [record(i) for i in range(6)]
    produce(bootstrap_servers, topic, first)
    got = []
    for rec in subscribe(bootstrap_servers, topic, group=group, idle_timeout=15):
        got.append(rec)
        if len(got) == 3:
            break  # the service stops while processing the third record
    assert ids(got) == ids(first[:3])
    produce(bootstrap_servers, topic, [record(6)])
    # the restarted service: the record it was processing again, then the rest; nothing before it
    # idle_timeout counts from the call, group join included: Tansu's rejoin took over 5 s once under CI load
    # (the restarted subscriber read nothing); 15 s as for the first subscriber
    again = list(subscribe(bootstrap_servers, topic, group=group, idle_timeout=15))
    assert ids(again) == ids(first[2:] + [record(6)])
    # all of it committed now: a third start finds nothing new
    assert list(subscribe(bootstrap_servers, topic, group=group, idle_timeout=5)) == []


@pytest.mark.slow
def test_the_ten_line_consumer_of_the_docs_runs_and_resumes_as_a_process(bootstrap_servers, topic_name, tmp_path):
    doc = (ROOT / "docs" / "consuming.md").read_text()
    blocks = re.findall(r"## A 10-line consumer.*?```python\n(.+?)```", doc, flags=re.S)
    assert blocks, "docs/consuming.md lost its consumer snippet"
    snippet = blocks[0]
    assert len(snippet.strip().splitlines()) <= 10
    script = tmp_path / "consumer.py"
    script.write_text(snippet)
    topic = topic_name("releases")
    produce(bootstrap_servers, topic, [record(0, keys=("Crimson River", "Mira's Winter")), record(0, "alerts"),
                                       record(0, keys=("Crimson River", "Mira's Winter")),
                                       record(1, keys=(), hit_bottom=True)])

    def run() -> list[str]:
        res = subprocess.run([sys.executable, str(script), bootstrap_servers, topic], capture_output=True,
                             text=True, timeout=120, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        return res.stdout.splitlines()

    assert run() == [f"{record(0)['window']['start']}-{record(0)['window']['end']} released: "
                     "Crimson River, Mira's Winter (stopped early at ⊥)",
                     f"{record(1)['window']['start']}-{record(1)['window']['end']} released: - (stopped early at ⊥)"]
    produce(bootstrap_servers, topic, [record(2, keys=("Crimson River",), hit_bottom=False)])
    assert run() == [f"{record(2)['window']['start']}-{record(2)['window']['end']} released: Crimson River"]

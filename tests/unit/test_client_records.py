"""stream_dp.client's record check and de-duplication memory (no broker)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from release_records import record

from stream_dp.client import (
    InvalidReleaseRecord, SeenIds, UnsupportedSchemaVersion, check_record, release_types, report_invalid)


def test_a_valid_record_passes_as_bytes_text_or_dict():
    rec = record(0)
    assert check_record(json.dumps(rec).encode()) == rec
    assert check_record(json.dumps(rec)) == rec
    assert check_record(rec) is rec


@pytest.mark.parametrize("version", [2, 0, "1", None, True, 1.5])
def test_an_unknown_schema_version_is_refused_naming_the_record_and_the_version(version):
    rec = record(3, schema_version=version)
    with pytest.raises(UnsupportedSchemaVersion) as info:
        check_record(rec, where="releases/0@7")
    message = str(info.value)
    assert rec["release_id"] in message and f"schema_version {version!r}" in message
    assert "reads schema_version 1 only" in message and message.endswith("(at releases/0@7)")
    assert info.value.release_id == rec["release_id"]


def test_a_newer_record_is_reported_as_newer_not_as_invalid():
    rec = record(0, schema_version=2)
    rec["brand_new_block"] = {"x": 1}  # would fail additionalProperties under schema 1
    with pytest.raises(UnsupportedSchemaVersion):
        check_record(rec)


@pytest.mark.parametrize("value,expected", [
    (b"{nope", "message is not JSON"),
    (b"[1, 2]", "not an object (list)"),
    (json.dumps({**record(0), "status": "maybe"}).encode(), "status: 'maybe' is not one of"),
    (json.dumps({k: v for k, v in record(0).items() if k != "budget"}).encode(), "'budget' is a required property"),
    (json.dumps({**record(0), "items": [{"rank": 1}]}).encode(), "items/0: 'key' is a required property"),
])
def test_malformed_records_are_invalid_with_the_place_at_fault(value, expected):
    with pytest.raises(InvalidReleaseRecord) as info:
        check_record(value)
    assert expected in str(info.value)


def test_the_default_handler_raises_for_an_unknown_version_and_logs_the_rest(caplog):
    with pytest.raises(UnsupportedSchemaVersion):
        report_invalid(UnsupportedSchemaVersion("v2"))
    report_invalid(InvalidReleaseRecord("broken"))
    assert "skipped a message on the releases topic: broken" in caplog.text


def test_seen_ids_remember_the_most_recent_capacity():
    seen = SeenIds(capacity=2)
    assert seen.first_time("a") and seen.first_time("b") and not seen.first_time("a")
    assert seen.first_time("c")  # forgets b, the least recently seen
    assert not seen.first_time("a") and seen.first_time("b")
    with pytest.raises(ValueError):
        SeenIds(0)


def test_release_types_come_from_the_shipped_schema():
    assert {"topk", "alerts", "sample"} <= set(release_types())


def test_the_schema_knows_exactly_the_configured_release_types_plus_status():
    from stream_dp.config import RELEASE_TYPES, config_from_mapping

    assert release_types() == (*RELEASE_TYPES, "status")  # one list: the config's [releases.*] sections
    cfg = config_from_mapping({"releases": {"argmax": {"enabled": True}, "topk": {"enabled": True}}}, environ={})
    assert cfg.releases.enabled() == ["topk", "argmax", "histogram"]  # in RELEASE_TYPES order

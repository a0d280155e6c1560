"""Config: every setting documented and overridable from the environment; errors name the setting."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, get_origin, get_type_hints

import pytest
from pydantic import SecretStr

from stream_dp.config import (DEFAULT_CONFIG_PATH, Config, ConfigError, config_from_mapping, load_config)
from stream_dp.renamed_settings import RENAMED

ROOT = Path(__file__).resolve().parents[2]
CONFIG_FILE = ROOT / "config" / "stream-dp.toml"


def settings(cls: type = Config, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any, Any]]:
    """Every leaf setting as (path parts, type, default); deprecated names (stream_dp/renamed_settings.py:
    undocumented, tested in tests/unit/test_renamed_settings.py) left out."""
    out = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in RENAMED.get(".".join(prefix), {}):
            continue
        typ = hints[f.name]
        if get_origin(typ) is Literal:  # an enumeration: its values are strings
            typ = str
        if dataclasses.is_dataclass(typ):
            out += settings(typ, prefix + (f.name,))
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append((prefix + (f.name,), typ, default))
    return out


ALL_SETTINGS = settings()

# A valid non-default value for each enumerated / constrained string setting.
STRING_VALUES = {
    "kafka.security_protocol": "SASL_SSL",
    "kafka.sasl_mechanism": "SCRAM-SHA-512",
    "redis.url": "rediss://:pw@cache.example:6380/2",
    "contribution.unit": "event",
    "releases.alerts.noise": "laplace",
    "releases.histogram.noise": "laplace",
    "releases.histogram.calibration": "exact",
    "releases.histogram.weighting": "per_user",
    "releases.sample.scheme": "ppswor",
    "releases.watch_topk.noise": "exponential",
    "windows.start": "2026-11-03T00:00:00Z",
    "windows.layout": "key",
    "ingest.kafka_client": "kafka-python",
    "keys.normalization": "NFKC",
    "release.kafka_client": "kafka-python",
    "releases.topk.discovery": "limited_domain",
    "releases.topk.domain_order": "frequent",
    "releases.alerts.domain_order": "frequent",
    "releases.histogram.domain_order": "frequent",
}


# Settings of a union type (e.g. "auto" or an integer): environment text and the value it sets.
UNION_VALUES = {"redis.min_replicas_acked": ("2", 2), "kafka.replication_factor": ("3", 3),
                "kafka.min_insync_replicas": ("2", 2),
                # retention.ms: -1 (unlimited, the default) or at least a minute
                "kafka.events_retention_ms": ("86400000", 86_400_000),
                "kafka.releases_retention_ms": ("86400000", 86_400_000)}


def other_value(dotted: str, typ: Any, default: Any) -> tuple[str, Any]:
    """(environment text, expected value) for a valid value different from the default."""
    if dotted in UNION_VALUES:
        return UNION_VALUES[dotted]
    if typ is bool:
        return ("false" if default else "true"), (not default)
    if typ is int:
        return str(default + 1), default + 1
    if typ is float:
        value = default / 2 if default else 0.5
        return repr(value), value
    if typ is SecretStr:  # compared by the secret's value
        value = f"{dotted.rsplit('.', 1)[-1]}-12345"
        return value, SecretStr(value)
    if typ is str:
        value = STRING_VALUES.get(dotted, f"{dotted.rsplit('.', 1)[-1]}-12345")
        return value, value
    if dotted.endswith(".domain_sources"):  # enabled release types (the histogram, on by default, learns its domain)
        return '["histogram"]', ("histogram",)
    return '["movie-1", "movie 2"]', ("movie-1", "movie 2")  # tuple[str, ...]: the watchlist


def env_name(parts: tuple[str, ...]) -> str:
    return "STREAM_DP_" + "__".join(p.upper() for p in parts)


def test_settings_are_enumerated():
    assert len(ALL_SETTINGS) > 60
    assert (("releases", "topk", "k"), int, 10) in ALL_SETTINGS


@pytest.mark.parametrize("parts,typ,default", ALL_SETTINGS, ids=[".".join(p) for p, _, _ in ALL_SETTINGS])
def test_every_setting_is_overridable_from_the_environment(parts, typ, default):
    dotted = ".".join(parts)
    text, expected = other_value(dotted, typ, default)
    assert expected != default
    environ = {env_name(parts): text}
    if dotted == "releases.alerts.include_released_topk":  # then a watchlist is required
        environ["STREAM_DP_RELEASES__ALERTS__WATCHLIST"] = '["a"]'
    cfg = config_from_mapping({}, environ=environ)
    value: Any = cfg
    for part in parts:
        value = getattr(value, part)
    assert value == expected


def test_environment_beats_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[releases.topk]\nk = 7\n')
    cfg = load_config(path, environ={"STREAM_DP_RELEASES__TOPK__K": "20"})
    assert cfg.releases.topk.k == 20


def test_numeric_looking_text_stays_a_string_for_string_settings():
    cfg = config_from_mapping({}, environ={"STREAM_DP_REDIS__PASSWORD": "12345",
                                           "STREAM_DP_KAFKA__SASL_PASSWORD": "true",
                                           "STREAM_DP_KAFKA__CLIENT_ID": '"quoted id"'})
    assert cfg.redis.password.get_secret_value() == "12345"
    assert cfg.kafka.sasl_password.get_secret_value() == "true"
    assert cfg.kafka.client_id == "quoted id"


def test_unrelated_environment_is_ignored():
    cfg = config_from_mapping({}, environ={"PATH": "/bin", "STREAM_DPX": "1"})
    assert cfg == Config()


# Bad values: (setting, environment text, words the message must contain besides the setting's name)
BAD = [
    ("kafka.security_protocol", "TLS", "PLAINTEXT"),
    ("kafka.sasl_mechanism", "GSSAPI", "SCRAM-SHA-256"),
    ("kafka.events_topic", '""', "non-empty"),
    ("kafka.releases_topic", "events", "different"),
    ("kafka.max_poll_records", "0", ">= 1"),
    ("kafka.session_timeout_ms", "0", ">= 6000 (Apache Kafka's default group.min.session.timeout.ms"),
    ("kafka.heartbeat_interval_ms", "6000", "< kafka.session_timeout_ms"),
    ("redis.url", "http://localhost:6379", "redis://"),
    ("redis.key_prefix", "a{b}", "braces"),
    ("redis.socket_timeout_seconds", "0", "> 0"),
    ("events.user_field", '""', "non-empty"),
    ("events.key_field", "user", "different"),
    ("events.max_key_bytes", "0", ">= 1"),
    ("events.max_user_bytes", "0", ">= 1"),
    ("windows.size_seconds", "0", ">= 1"),
    ("windows.allowed_lateness_seconds", "-1", ">= 0"),
    ("windows.idle_partition_timeout_seconds", "0", "> 0"),
    ("windows.retention_seconds", "-5", ">= 0"),
    ("contribution.unit", "device", "'user' or 'event'"),
    ("contribution.max_keys_per_user", "0", ">= 1"),
    ("budget.period_seconds", "0", ">= 1"),
    ("budget.epsilon", "-1", "> 0"),
    ("budget.epsilon", "inf", "> 0"),
    ("budget.delta", "1.5", "(0, 1)"),
    ("budget.delta_prime", "0", "(0, 1)"),
    ("budget.delta_prime", "0.5", "< budget.delta"),
    ("budget.lifetime_epsilon", "-1", ">= 0"),
    ("releases.topk.k", "0", ">= 1"),
    ("releases.topk.k_bar", "5", ">= releases.topk.k"),
    ("releases.topk.window_epsilon", "0", "> 0"),
    ("releases.topk.window_delta", "1", "(0, 1)"),
    ("releases.alerts.k", "0", ">= 1"),
    ("releases.alerts.epsilon", "0", "> 0"),
    ("releases.alerts.threshold", "nan", "finite"),
    ("releases.alerts.noise", "gaussian", "laplace"),
    ("releases.alerts.theta", "1", "[0, 1)"),
    ("releases.alerts.confidence", "1", "(0, 1)"),
    ("releases.sample.scheme", "uniform", "pps"),
    ("releases.sample.tau", "0", "> 0"),
    ("releases.sample.window_epsilon", "0", "> 0"),
    ("releases.sample.window_delta", "0", "(0, 1)"),
    ("metrics.port", "70000", "[0, 65535]"),
    ("metrics.host", '""', "non-empty"),
    # the allowed values are read from the field's pydantic constraints, its description explains them
    ("windows.log_segment_bytes", "512", "in [1024, 268435456] (half of Redis's 512 MB string cap), got 512"),
    ("budget.lifetime_epsilon", "-1", ">= 0 (0 disables it), got -1"),
    ("kafka.sasl_mechanism", "GSSAPI", "empty or one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, got 'GSSAPI'"),
    ("ingest.kafka_client", "librdkafka", "'kafka-python' or 'confluent', got 'librdkafka'"),
    ("kafka.replication_factor", "0", '"auto" (min(3, brokers)) or an integer >= 1, got 0'),
    # wrong types
    ("releases.topk.k", "ten", "integer"),
    ("releases.topk.enabled", "yes", "true or false"),
    ("budget.epsilon", '"big"', "number"),
    ("releases.alerts.watchlist", "[1, 2]", "array of strings"),
]


@pytest.mark.parametrize("setting,text,words", BAD, ids=[f"{s}={t}" for s, t, _ in BAD])
def test_bad_values_name_the_setting_the_range_and_the_variable(setting, text, words):
    env = env_name(tuple(setting.split(".")))
    parts = setting.split(".")
    # a release type's ranges apply when it is enabled (test_disabled_release_types_...): enable it
    enabled = {env_name((*parts[:2], "enabled")): "true"} if parts[0] == "releases" and parts[2] != "enabled" else {}
    with pytest.raises(ConfigError) as info:
        config_from_mapping({}, environ={**enabled, env: text})
    message = str(info.value)
    assert message.startswith(setting + " "), message
    assert words in message, message
    assert env in message, message  # names the environment variable that set it


def test_disabled_release_types_and_their_off_range_settings():
    # a release type is validated only when enabled (a disabled type costs nothing): enabling it applies its
    # ranges -- the off-by-default top-k, alerts and sample as much as argmax / watch_topk
    config_from_mapping({"releases": {"topk": {"k": 0}, "alerts": {"epsilon": 0}, "sample": {"tau": 0}}}, environ={})
    with pytest.raises(ConfigError, match=r"^releases\.topk\.k "):
        config_from_mapping({"releases": {"topk": {"enabled": True, "k": 0}}}, environ={})
    with pytest.raises(ConfigError, match=r"^releases\.argmax\.window_epsilon "):
        config_from_mapping({"releases": {"argmax": {"enabled": True, "window_epsilon": 0}}}, environ={})
    with pytest.raises(ConfigError, match=r"^releases\.watch_topk\.noise "):
        config_from_mapping({"releases": {"watch_topk": {"enabled": True, "noise": "gaussian"}}}, environ={})


def test_histogram_exact_calibration_is_gaussian_only():
    config_from_mapping({"releases": {"histogram": {"enabled": True, "calibration": "exact"}}}, environ={})
    with pytest.raises(ConfigError, match=r"^releases\.histogram\.calibration .*noise = \"laplace\""):
        config_from_mapping({"releases": {"histogram": {"enabled": True, "noise": "laplace",
                                                        "calibration": "exact"}}}, environ={})


def test_per_user_weighting_is_gaussian_zcdp_and_user_level_only():
    config_from_mapping({"releases": {"histogram": {"enabled": True, "weighting": "per_user"}}}, environ={})
    for other in ({"noise": "laplace"}, {"calibration": "exact"}):
        with pytest.raises(ConfigError, match=r"^releases\.histogram\.weighting .*\(§8d\), got 'per_user'"):
            config_from_mapping({"releases": {"histogram": {"enabled": True, "weighting": "per_user", **other}}},
                                environ={})
    from stream_dp.release.builders import HistogramBuilder

    events = config_from_mapping({"contribution": {"unit": "event"},
                                  "releases": {"histogram": {"enabled": True, "weighting": "per_user"}}}, environ={})
    with pytest.raises(ConfigError, match=r"^releases\.histogram\.weighting must be \"uniform\" with "
                                          r"contribution\.unit = \"event\""):
        HistogramBuilder(events)


def test_unknown_settings_are_named_with_their_section_and_variable():
    with pytest.raises(ConfigError) as info:
        config_from_mapping({}, environ={"STREAM_DP_KAFKA__BOOTSTRAP": "x:9092"})
    message = str(info.value)
    assert "bootstrap" in message and "[kafka]" in message and "bootstrap_servers" in message
    assert "STREAM_DP_KAFKA__BOOTSTRAP" in message
    with pytest.raises(ConfigError, match="must look like STREAM_DP_SECTION__KEY"):
        config_from_mapping({}, environ={"STREAM_DP_KAFKA": "x"})
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) topkk in \[releases\]"):
        load_config(None, environ={"STREAM_DP_RELEASES__TOPKK__K": "3"})


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\n")
    with pytest.raises(ConfigError, match="bad.toml.*not valid TOML"):
        load_config(bad, environ={})


# --------------------------------------------------------------------------------------------------
# The documented default file
# --------------------------------------------------------------------------------------------------


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def test_default_file_sets_every_setting_to_the_code_default():
    """Without any file the code defaults apply; they must equal the documented file (no drift)."""
    in_file = flatten(tomllib.loads(CONFIG_FILE.read_text()))
    in_code = {".".join(p): (list(d) if isinstance(d, tuple) else d.get_secret_value() if isinstance(d, SecretStr) else d)
               for p, _, d in ALL_SETTINGS}
    assert set(in_file) == set(in_code), "settings missing from / unknown to config/stream-dp.toml"
    assert in_file == in_code
    assert load_config(CONFIG_FILE, environ={}) == Config()


def test_every_setting_line_carries_a_comment():
    section = ""
    undocumented = []
    for line in CONFIG_FILE.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if re.match(r"^[a-z_]+\s*=", line) and not re.match(
                r'^[a-z_]+\s*=\s*("[^"]*"|\[[^\]]*\]|[^\s#]+)\s*#\s*\S', line):
            undocumented.append(f"{section}.{line.split('=')[0].strip()}")
    assert not undocumented, f"settings without an explanatory comment: {undocumented}"


def test_default_config_is_packaged_with_stream_dp():
    """The default file lives inside the package (a symlink in the source tree), and is package data."""
    import stream_dp

    package_dir = Path(stream_dp.__file__).resolve().parent
    assert DEFAULT_CONFIG_PATH.parent == package_dir / "defaults"
    assert DEFAULT_CONFIG_PATH.read_bytes() == CONFIG_FILE.read_bytes()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["stream_dp"]
    relative = DEFAULT_CONFIG_PATH.relative_to(package_dir).as_posix()
    assert any(fnmatch.fnmatch(relative, pat) for pat in patterns), patterns
    assert load_config(None, environ={}) == load_config(CONFIG_FILE, environ={})


def test_tool_variables_are_not_read_as_settings():
    cfg = config_from_mapping({}, environ={"STREAM_DP_DEVSTACK_STATE": "/tmp/x.json", "STREAM_DP_LOG_LEVEL": "DEBUG",
                                           "STREAM_DP_TANSU": "/bin/tansu", "STREAM_DP_REDIS_SERVER": "/bin/r",
                                           "STREAM_DP_TEST_REDIS_URL": "redis://h"})
    assert cfg.redis.url == "" and cfg.kafka.bootstrap_servers == ""


# --------------------------------------------------------------------------------------------------
# The settings machinery (pydantic-settings) and `stream-dp config check`
# --------------------------------------------------------------------------------------------------


def test_sources_are_layered_by_pydantic_settings_and_sections_validate_themselves():
    from pydantic_settings import BaseSettings

    from stream_dp.config import KafkaConfig, Settings, with_settings

    assert issubclass(Settings, BaseSettings) and set(Settings.model_fields) == {f.name for f in
                                                                                   dataclasses.fields(Config)}
    with pytest.raises(ValueError, match="max_poll_records"):  # a section built by hand is checked too
        dataclasses.replace(KafkaConfig(), max_poll_records=0)
    cfg = with_settings(Config(), "windows", size_seconds=60)
    assert cfg.windows.size_seconds == 60 and cfg.kafka == Config().kafka
    with pytest.raises(ConfigError, match=r"^windows\.size_seconds must be >= 1, got 0$"):
        with_settings(Config(), "windows", size_seconds=0)


def test_every_error_of_a_load_is_named_once():
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"windows": {"size_seconds": 0}},
                            environ={"STREAM_DP_METRICS__PORT": "70000",
                                     "STREAM_DP_RELEASES__ALERTS__WATCHLIST": "[1, 2]"})
    message = str(info.value)
    assert "windows.size_seconds must be >= 1" in message
    assert "metrics.port must be in [0, 65535], got 70000 (set by environment variable STREAM_DP_METRICS__PORT)" in message
    assert message.count("releases.alerts.watchlist") == 1


def test_config_check_names_a_bad_value_and_the_variable_that_set_it(monkeypatch, capsys):
    from stream_dp.cli import main

    monkeypatch.setenv("STREAM_DP_BUDGET__DELTA", "1.5")
    assert main(["config", "check", "--config", str(CONFIG_FILE)]) == 2
    err = capsys.readouterr().err
    assert "config error: budget.delta must be in (0, 1), got 1.5 (set by environment variable " \
           "STREAM_DP_BUDGET__DELTA)" in err

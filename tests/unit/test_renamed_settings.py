"""The release settings' old names keep working, each with one warning line naming its replacement
(stream_dp/renamed_settings.py); an old name and its replacement together are an error naming both."""

from __future__ import annotations

import logging

import pytest

from stream_dp import renamed_settings
from stream_dp.config import ConfigError, config_from_mapping, load_config, with_settings
from stream_dp.renamed_settings import RENAMED


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(renamed_settings, "_warned", set())


CASES = [(section, old, new, meaning) for section, keys in RENAMED.items() for old, (new, meaning) in keys.items()]


@pytest.mark.parametrize(("section", "old", "new", "meaning"), CASES, ids=[f"{c[0]}.{c[1]}" for c in CASES])
def test_an_old_name_works_and_warns_once_naming_its_replacement(section, old, new, meaning, caplog) -> None:
    _, name = section.split(".")
    value = 0.3 if old == "epsilon" else 3e-7
    env = f"STREAM_DP_RELEASES__{name.upper()}__{old.upper()}"
    with caplog.at_level(logging.WARNING, logger="stream_dp.config"):
        cfg = config_from_mapping({}, environ={env: repr(value)})
        config_from_mapping({}, environ={env: repr(value)})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0]  # one line, once per process
    assert lines[0].startswith(f"{section}.{old} is deprecated: set {section}.{new}")
    settings = getattr(cfg.releases, name)
    if meaning is None:  # the same meaning: read as the new name
        assert getattr(settings, new) == value
    else:  # a mechanism parameter: kept as such, the window budget left at its default
        assert getattr(settings, old) == value and meaning in lines[0]


@pytest.mark.parametrize(("section", "old", "new"), [(c[0], c[1], c[2]) for c in CASES])
def test_an_old_name_and_its_replacement_together_are_refused(section, old, new) -> None:
    _, name = section.split(".")
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"releases": {name: {old: 0.5 if old == "epsilon" else 1e-7, new: 0.5 if old == "epsilon"
                                                 else 1e-7}}}, environ={})
    message = str(info.value)
    assert message.startswith(f"{section}.{old} must be unset when {section}.{new} is set"), message


def test_the_default_file_uses_only_the_new_names(caplog) -> None:
    from stream_dp.config import load_config

    with caplog.at_level(logging.WARNING, logger="stream_dp.config"):
        load_config(None, environ={})
    assert not caplog.records


def test_an_environment_variable_overrides_the_files_key_under_either_name() -> None:
    """The shipped file sets the window budget; an operator's deprecated variable overrides it, as a variable of
    the same name would (and a new-name variable overrides a file's deprecated key). Both names in one place
    stay refused (above)."""
    cfg = load_config(None, environ={"STREAM_DP_RELEASES__HISTOGRAM__EPSILON": "2.0",
                                     "STREAM_DP_RELEASES__TOPK__DELTA": "1e-6"})
    assert (cfg.releases.histogram.epsilon, cfg.releases.topk.delta) == (2.0, 1e-6)
    old_file = {"releases": {"sample": {"enabled": True, "epsilon": 0.3}}}
    cfg = config_from_mapping(old_file, environ={"STREAM_DP_RELEASES__SAMPLE__WINDOW_EPSILON": "0.7"})
    assert cfg.releases.sample.window_epsilon == 0.7


def test_a_config_with_a_deprecated_key_in_effect_survives_a_change_of_another_setting() -> None:
    """The release worker changes settings of a loaded config (with_settings: written back to a mapping, which
    carries the replacement's default beside the deprecated key): the deprecated key stays in effect, not an
    error. (Without in_effect every worker configured with an old key exited 2 at start.)"""
    cfg = config_from_mapping({"releases": {"topk": {"enabled": True, "epsilon": 1.0, "delta": 1e-6}}}, environ={})
    changed = with_settings(cfg, "release", poll_interval_seconds=0.3)
    assert (changed.releases.topk.epsilon, changed.releases.topk.delta) == (1.0, 1e-6)
    assert changed.release.poll_interval_seconds == 0.3

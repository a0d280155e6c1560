"""The demo's config: demo-sized defaults under the environment, written to a file the workers read back."""

from __future__ import annotations

import pytest

from stream_dp.config import Config, ConfigError, config_from_mapping, load_config
from stream_dp.demo import DEMO_DEFAULTS, config_to_toml, demo_config


def test_written_config_reads_back_equal(tmp_path):
    cfg = config_from_mapping({"kafka": {"bootstrap_servers": "127.0.0.1:1234", "sasl_password": 'a"b\\c'},
                               "releases": {"alerts": {"watchlist": ["Echo, Again (1999)", "ü"]}},
                               "budget": {"delta": 2e-5}}, environ={})
    path = tmp_path / "demo.toml"
    path.write_text(config_to_toml(cfg, header="generated\nfor a test"))
    assert path.read_text().startswith("# generated\n# for a test\n")
    assert load_config(path, environ={}) == cfg
    assert load_config(path, environ={}) != Config()


def test_demo_defaults_sit_under_the_environment():
    cfg = demo_config(None, environ={})
    assert cfg.windows.size_seconds == DEMO_DEFAULTS["windows"]["size_seconds"] == 86400
    cfg = demo_config(None, environ={"STREAM_DP_WINDOWS__SIZE_SECONDS": "3600"})
    assert cfg.windows.size_seconds == 3600
    with pytest.raises(ConfigError, match="STREAM_DP_RELEASES__TOPK__K"):
        demo_config(None, environ={"STREAM_DP_RELEASES__TOPK__K": "0"})


def test_a_given_config_file_is_used_as_is(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[windows]\nsize_seconds = 600\n")
    assert demo_config(str(path), environ={}).windows.size_seconds == 600
    path.write_text("")
    assert demo_config(str(path), environ={}).windows == Config().windows  # no demo defaults sneak in

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


def test_a_user_file_is_replayed_in_event_time_order(tmp_path):
    from stream_dp.demo import Demo, DemoOptions

    path = tmp_path / "ratings.csv"
    path.write_text("userId,movieId,rating,timestamp\n1,10,4.0,300\n1,11,3.0,100\n2,10,5.0,200\n3,,1.0,50\n")
    demo = Demo(DemoOptions(input_path=str(path), user_column="userId", key_column="movieId",
                            time_column="timestamp", workdir=str(tmp_path / "work")))
    events, what = demo._events(demo_config(None, environ={}))
    assert [e and (e.user, e.key, e.ts) for e in events] == [("1", "11", 100.0), ("2", "10", 200.0),
                                                             ("1", "10", 300.0), None]
    assert "sorted by event time" in what

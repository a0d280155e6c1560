"""The demo's config: demo-sized defaults under the environment, the generated catalogue as the histogram's
public domain, the release-choice table's pick for the demo's stream, written to a file the workers read back."""

from __future__ import annotations

import pytest

from stream_dp.config import Config, ConfigError, config_from_mapping, load_config
from stream_dp.dev.demo_config import DEMO_DEFAULTS, catalogue_domain, config_to_toml, demo_config


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
    with pytest.raises(ConfigError, match="STREAM_DP_RELEASES__HISTOGRAM__EPSILON"):
        demo_config(None, environ={"STREAM_DP_RELEASES__HISTOGRAM__EPSILON": "0"})
    # limited-domain top-k is one setting away
    assert demo_config(None, environ={"STREAM_DP_RELEASES__TOPK__ENABLED": "true"}).releases.enabled() == [
        "topk", "histogram"]


def test_a_given_config_file_is_used_as_is(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[windows]\nsize_seconds = 600\n")
    assert demo_config(str(path), environ={}).windows.size_seconds == 600
    path.write_text("")
    assert demo_config(str(path), environ={}).windows == Config().windows  # no demo defaults sneak in


def test_a_user_file_is_replayed_in_event_time_order(tmp_path):
    from stream_dp.dev.demo_config import DemoOptions
    from stream_dp.dev.demo_feed import load_events

    path = tmp_path / "ratings.csv"
    path.write_text("userId,movieId,rating,timestamp\n1,10,4.0,300\n1,11,3.0,100\n2,10,5.0,200\n3,,1.0,50\n")
    options = DemoOptions(input_path=str(path), user_column="userId", key_column="movieId", time_column="timestamp")
    events, what = load_events(options, demo_config(None, environ={}))
    assert [e and (e.user, e.key, e.ts) for e in events] == [("1", "11", 100.0), ("2", "10", 200.0),
                                                             ("1", "10", 300.0), None]
    assert "sorted by event time" in what


def test_the_demo_releases_what_the_release_choice_table_recommends_for_its_stream(tmp_path):
    """The generated stream's cell -- its users per one-day window, Δ, k, one window's ε, a public catalogue --
    is where the table's best type is the exact-calibrated histogram over the domain; the demo runs that."""
    from collections import defaultdict

    from stream_dp.dev.demo_data import generate_ratings
    from stream_dp.release.budget_plan import plan_for

    users: dict[int, set[int]] = defaultdict(set)
    for r in generate_ratings(users=6000, movies=3000, days=28, seed=7):  # the demo's defaults
        users[r.timestamp // 86400].add(r.user_id)
    per_window = sum(len(u) for u in users.values()) / len(users)
    assert 900 < per_window < 1200
    cfg, _ = catalogue_domain(demo_config(None, environ={}), tmp_path / "catalogue.txt", movies=3000, seed=7)
    assert cfg.releases.enabled() == ["histogram"]
    plan = plan_for(cfg)
    assert plan.windows_per_period == 1 and plan.windows_fitting(plan.period_cap) >= 1
    advice = plan.recommendation(expected_users=per_window)
    assert advice["method"] == "sdp_histogram_exact_partial", advice  # a histogram domain counts as partial
    assert cfg.releases.histogram.calibration == "exact" and cfg.releases.histogram.domain_file


def test_the_catalogue_is_every_title_the_generator_can_emit_and_only_for_the_generated_stream(tmp_path):
    from stream_dp.dev.demo_data import generate_ratings, movie_titles

    cfg, said = catalogue_domain(demo_config(None, environ={}), tmp_path / "catalogue.txt", movies=200, seed=3)
    titles = (tmp_path / "catalogue.txt").read_text(encoding="utf-8").splitlines()
    assert titles == movie_titles(200, seed=3) and len(set(titles)) == 200
    assert {r.title for r in generate_ratings(users=300, movies=200, days=2, seed=3)} <= set(titles)
    assert cfg.releases.histogram.domain_file == str(tmp_path / "catalogue.txt") and "200 movie titles" in said
    # the catalogue is every key there is: a domain learned from earlier releases could add none, so it is off
    assert Config().releases.histogram.domain_from_released and not cfg.releases.histogram.domain_from_released
    assert "domain_from_released off" in said
    mine = config_from_mapping({"releases": {"histogram": {"domain": ["x"]}}}, environ={})
    assert catalogue_domain(mine, tmp_path / "other.txt", movies=200, seed=3) == (mine, "")  # yours stays
    off = config_from_mapping({"releases": {"histogram": {"enabled": False}, "topk": {"enabled": True}}}, environ={})
    assert catalogue_domain(off, tmp_path / "other.txt", movies=200, seed=3) == (off, "")
    assert not (tmp_path / "other.txt").exists()

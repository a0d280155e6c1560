"""Every Lua script of the loader (stream_dp/store/scripts.py) compiles on a real redis-server, and the window
states the scripts name are the ones Python names (stream_dp/store/window_state.py)."""

from __future__ import annotations

import pytest
import redis

from stream_dp.store import scripts, window_state
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration


def test_every_script_loads_under_the_sha_its_registration_sends(redis_client: redis.Redis) -> None:
    for name in scripts.SCRIPTS:
        registered = scripts.register(redis_client, name)
        assert redis_client.script_load(scripts.script_text(name)) == registered.sha, name
    assert all(redis_client.script_exists(*[scripts.register(redis_client, n).sha for n in scripts.SCRIPTS]))


def test_the_scripts_name_the_states_python_reads(redis_client: redis.Redis) -> None:
    got = redis_client.eval(window_state.lua_constants()
                            + "return {WINDOW_OPEN, WINDOW_CLOSED, WINDOW_RELEASED}", 0)
    assert [s.decode() for s in got] == list(window_state.STATES)


def test_a_window_goes_open_closed_released_through_the_scripts(redis_client: redis.Redis) -> None:
    """The three scripts that write a shard's state, run on one window: the state Python reads after each."""
    keys = Keys("t")
    meta = keys.window_meta(0)
    redis_client.hset(meta, mapping={"start": 0, "end": 60, "state": window_state.OPEN})
    assert scripts.register(redis_client, "close_window")(keys=[meta], args=[0, 60, 60]) == 1
    assert redis_client.hget(meta, "state").decode() == window_state.CLOSED
    redis_client.set(keys.window_claim(0), "w:1")
    mark = scripts.register(redis_client, "mark_released")
    assert mark(keys=[keys.window_claim(0), meta, keys.window_counts(0), keys.window_users(0),
                      keys.window_offsets(0)], args=["w:1", 3600]) == 1
    assert redis_client.hget(meta, "state").decode() == window_state.RELEASED
    assert scripts.register(redis_client, "close_window")(keys=[meta], args=[0, 60, 120]) == 0  # stays released
    assert redis_client.hget(meta, "state").decode() == window_state.RELEASED

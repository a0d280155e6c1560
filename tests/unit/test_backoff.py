"""The shared retry backoff: doubling to the cap, jitter inside its bounds, reset after a success."""

from __future__ import annotations

import random

import pytest

from stream_dp.backoff import Backoff


def test_delays_double_to_the_cap_without_jitter():
    b = Backoff(0.1, 1.0, jitter=0.0)
    assert [b.next_delay() for _ in range(7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_jitter_stays_within_its_band_and_delays_still_grow():
    rnd = random.Random(5)
    b = Backoff(0.1, 5.0, jitter=0.2, rand=rnd.random)
    delays = [b.next_delay() for _ in range(12)]
    for n, d in enumerate(delays):
        base = min(5.0, 0.1 * 2 ** n)
        assert 0.8 * base <= d <= base
    assert len(set(delays)) == len(delays), "jitter spreads the delays"
    assert all(later >= 1.5 * earlier for earlier, later in zip(delays[:5], delays[1:6]))


def test_reset_starts_again_at_the_initial_delay():
    b = Backoff(0.5, 8.0, jitter=0.0)
    for _ in range(4):
        b.next_delay()
    b.reset()
    assert b.failures == 0 and b.next_delay() == 0.5


@pytest.mark.parametrize("initial,cap,jitter", [(0, 1, 0.1), (2, 1, 0.1), (0.1, 1, 1.0), (0.1, 1, -0.1)])
def test_bad_settings_are_refused(initial, cap, jitter):
    with pytest.raises(ValueError):
        Backoff(initial, cap, jitter=jitter)

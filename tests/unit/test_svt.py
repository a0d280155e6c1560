"""AdaptiveSVT: budget bookkeeping, break rule, resumability, state validation, batch = one-at-a-time."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dp.accounting.events import PureDpEvent
from stream_dp.mechanisms import AdaptiveSVT, SVTExhaustedError, adaptive_svt
from stream_dp.mechanisms.svt_noise import default_theta

NOISES = ("laplace", "exponential", "geometric")


def _stream(seed: int, n: int, threshold: int = 100) -> list[int]:
    """Integer queries spread around the threshold: some far below, some near, some far above."""
    rng = np.random.default_rng(seed)
    return [int(v) for v in rng.choice([0, threshold - 20, threshold, threshold + 20, 10 * threshold], size=n)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 6), epsilon=st.floats(0.05, 5.0),
       noise=st.sampled_from(NOISES), monotone=st.booleans(), adaptive=st.booleans(),
       theta=st.one_of(st.none(), st.floats(0.01, 0.99)))
def test_realised_cost_is_the_seeds_bookkeeping(seed, k, epsilon, noise, monotone, adaptive, theta):
    svt = AdaptiveSVT(100, k=k, epsilon=epsilon, noise=noise, monotone=monotone, theta=theta,
                      adaptive=adaptive, rng=seed)
    top = middle = 0
    for value in _stream(seed, 400):
        if svt.exhausted:
            with pytest.raises(SVTExhaustedError):
                svt.process(value)
            break
        answer = svt.process(value)
        top += answer.branch == "top"
        middle += answer.branch == "middle"
        assert answer.cost == {"top": svt.epsilon2, "middle": svt.epsilon1, None: 0.0}[answer.branch]
        assert answer.above == (answer.branch is not None)
        realised = svt.epsilon0 + svt.epsilon2 * top + svt.epsilon1 * middle
        assert svt.spent == realised
        assert realised <= epsilon * (1 + 1e-12)
        # Algorithm 1's break rule "cost > ε − ε1", evaluated in real arithmetic on the counts
        assert svt.exhausted == (top + 2 * middle > 2 * (k - 1))
    if not adaptive:
        assert top == 0 and middle <= k
    assert svt.epsilon0 == pytest.approx(svt.theta * epsilon)
    assert svt.epsilon1 == pytest.approx((1 - svt.theta) * epsilon / k)
    assert svt.epsilon2 == pytest.approx(svt.epsilon1 / 2)
    assert svt.privacy_event() == PureDpEvent(epsilon, mechanism="adaptive_svt")


@pytest.mark.parametrize("noise", NOISES)
def test_all_top_answers_double_the_answers_and_all_middle_stop_at_k(noise):
    k = 5
    far = [10**6] * 100
    svt = AdaptiveSVT(100, k=k, epsilon=1.0, noise=noise, rng=1)
    answers = svt.process_many(far)
    assert [a.branch for a in answers] == ["top"] * (2 * k - 1)  # 2k−1 top answers use 2k−1 ≤ 2k units
    assert svt.exhausted and svt.remaining_fraction() == pytest.approx((1 - svt.theta) / (2 * k))
    svt2 = AdaptiveSVT(100, k=k, epsilon=1.0, noise=noise, adaptive=False, rng=1)
    answers2 = svt2.process_many(far)
    assert [a.branch for a in answers2] == ["middle"] * k and svt2.spent == pytest.approx(1.0)


@pytest.mark.parametrize("noise", NOISES)
def test_resuming_after_every_query_reproduces_the_uninterrupted_run(noise):
    for seed in range(4):
        values = _stream(100 + seed, 300)
        kwargs = dict(k=4, epsilon=0.8, noise=noise, monotone=seed % 2 == 0)
        whole = AdaptiveSVT(100, rng=np.random.default_rng(seed), **kwargs).process_many(values)
        # (a) the state holds no generator: resuming without one draws fresh noise (not the same stream)
        svt = AdaptiveSVT(100, rng=np.random.default_rng(seed), **kwargs)
        svt.process(values[0])
        state = json.loads(json.dumps(svt.to_state()))
        assert "rng" not in state and not any("generator" in str(v) for v in state.values())
        # (b) state without the generator; the caller passes the same generator on every resume
        shared = np.random.default_rng(seed)
        svt = AdaptiveSVT(100, rng=shared, **kwargs)
        resumed = []
        for value in values:
            if svt.exhausted:
                break
            resumed.append(svt.process(value))
            svt = AdaptiveSVT.from_state(json.loads(json.dumps(svt.to_state())), rng=shared)
        assert resumed == whole
        assert len(whole) >= 5


def test_the_noisy_threshold_is_never_redrawn_on_resume():
    svt = AdaptiveSVT(100, k=3, epsilon=1.0, rng=5)
    svt.process(120)
    state = svt.to_state()
    for rng in (None, 1, np.random.default_rng(2)):
        again = AdaptiveSVT.from_state(state, rng=rng)
        assert again.noisy_threshold == svt.noisy_threshold
        assert again.answers == svt.answers and again.spent == svt.spent


def test_batch_helper_equals_one_at_a_time():
    values = _stream(7, 500)
    for noise in NOISES:
        run = adaptive_svt(values, 100, k=6, epsilon=0.7, noise=noise, rng=11)
        svt = AdaptiveSVT(100, k=6, epsilon=0.7, noise=noise, rng=11)
        one_by_one = []
        for value in values:
            one_by_one.append(svt.process(value))
            if svt.exhausted:
                break
        assert list(run.answers) == one_by_one
        assert run.spent == svt.spent and run.exhausted == svt.exhausted
        assert run.events == (PureDpEvent(0.7, mechanism="adaptive_svt"),)


def _good_state() -> dict:
    svt = AdaptiveSVT(100, k=3, epsilon=1.0, rng=5)
    svt.process_many([150, 90, 1000])
    return json.loads(json.dumps(svt.to_state()))


BAD_FIELDS = [
    ("version", 2), ("mechanism", "other"), ("threshold", float("nan")), ("k", 0), ("k", 2.5),
    ("epsilon", -1.0), ("noise", "gaussian"), ("monotone", "yes"), ("adaptive", 1), ("theta", 1.0),
    ("epsilon0", 0.5), ("epsilon1", 1.0), ("epsilon2", 1e-9), ("threshold_noise", "x"),
    ("noisy_threshold", 0.0), ("queries", -1), ("top", 99), ("middle", 99), ("spent", 0.123),
    ("exhausted", True), ("rng", {"bit_generator": "Nope", "state": "{}"}),
    ("rng", {"bit_generator": "PCG64", "state": "not json"}),
    ("rng", {"bit_generator": "PCG64", "state": '{"bit_generator": "PCG64"}'}),
]


@pytest.mark.parametrize("name,value", BAD_FIELDS)
def test_from_state_rejects_a_bad_field_naming_it(name, value):
    state = _good_state()
    state[name] = value
    with pytest.raises(ValueError, match=repr(name) if name not in ("k",) else "'k'"):
        AdaptiveSVT.from_state(state)


def test_from_state_rejects_missing_fields_and_non_dicts():
    state = _good_state()
    del state["threshold_noise"]
    with pytest.raises(ValueError, match="threshold_noise"):
        AdaptiveSVT.from_state(state)
    with pytest.raises(ValueError, match="dict"):
        AdaptiveSVT.from_state([1, 2])  # type: ignore[arg-type]


def test_state_does_not_mutate_and_round_trips():
    state = _good_state()
    copy = json.loads(json.dumps(state))
    svt = AdaptiveSVT.from_state(state)
    assert state == copy
    assert svt.to_state() == state


@pytest.mark.parametrize("kwargs,match", [
    (dict(k=0, epsilon=1.0), "k"), (dict(k=2, epsilon=0.0), "epsilon"), (dict(k=2, epsilon=math.inf), "epsilon"),
    (dict(k=2, epsilon=1.0, noise="gauss"), "noise"), (dict(k=2, epsilon=1.0, theta=0.0), "theta"),
    (dict(k=2, epsilon=1.0, theta=1.5), "theta"), (dict(k=True, epsilon=1.0), "k"),
])
def test_bad_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveSVT(100, **kwargs)


def test_bad_values_raise_without_echoing_them():
    svt = AdaptiveSVT(100, k=2, epsilon=1.0, noise="geometric", rng=0)
    with pytest.raises(ValueError, match="integer") as info:
        svt.process(12345.5)
    assert "12345" not in str(info.value)
    with pytest.raises(ValueError, match="finite"):
        svt.process(float("nan"))
    assert svt.answers["queries"] == 0


def test_default_theta_is_the_seeds_optimum():
    k = 10
    assert default_theta(k, noise="laplace", monotone=True) == pytest.approx(1 / (1 + k ** (2 / 3)))
    assert default_theta(k, noise="exponential", monotone=False) == pytest.approx(1 / (1 + (4 * k * k) ** (1 / 3)))
    assert default_theta(k, noise="laplace", monotone=False, branch="top") == pytest.approx(
        1 / (1 + (16 * k * k) ** (1 / 3)))
    # the θ minimises the seed's middle-branch gap variance 2/ε0² + 2/ε1² (monotone Laplace)
    grid = np.linspace(0.01, 0.99, 9801)
    var = 2 / grid**2 + 2 * k**2 / (1 - grid) ** 2
    assert abs(grid[np.argmin(var)] - default_theta(k, noise="laplace", monotone=True)) < 2e-4


def test_sigma_is_the_standard_deviation_of_the_top_noise():
    eps, k = 1.3, 4
    for noise, monotone, want in [
        ("laplace", False, lambda e2: 2 * math.sqrt(2) / e2),
        ("laplace", True, lambda e2: math.sqrt(2) / e2),
        ("exponential", False, lambda e2: 2 / e2),
        ("exponential", True, lambda e2: 1 / e2),
        ("geometric", False, lambda e2: math.exp(e2 / 4) / (math.exp(e2 / 2) - 1)),
        ("geometric", True, lambda e2: math.exp(e2 / 2) / (math.exp(e2) - 1)),
    ]:
        svt = AdaptiveSVT(0, k=k, epsilon=eps, noise=noise, monotone=monotone, rng=0)
        assert svt.sigma == pytest.approx(want(svt.epsilon2), rel=1e-12), (noise, monotone)

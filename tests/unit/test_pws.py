"""private_weighted_sample: Monte-Carlo reporting/token frequencies, user-level calibration, the contract.

Statistical tests use fixed seeds and Bonferroni-corrected exact binomial tests plus chi-square
goodness-of-fit tests (asymptotic; bins merged until every expected count is ≥ 5) at a per-test level
α = 1e-6 / (number of tests), so each must-pass test fails falsely with probability ≤ 1e-6. The same
check is run on deliberately broken samplers and must reject them.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from scipy import stats

from stream_dp.accounting.events import ApproxDpEvent
from stream_dp.mechanisms import (
    PrivateWeightedSample,
    SamplingScheme,
    SanitizerTable,
    private_weighted_sample,
    pws_token_estimates,
)
from stream_dp.mechanisms.pws import sanitizer_table
from stream_dp.mechanisms.pws_tables import SanitizerTableCache

FREQUENCIES = [1, 2, 4, 8, 12, 16, 20, 30, 45, 1000, 10**6]
PER_FREQUENCY = 20_000
FAMILY_ALPHA = 1e-6


def token_check(table: SanitizerTable, tokens_by_frequency: dict[int, np.ndarray]) -> list[str]:
    """Failures of: #reported ~ Binomial(n, π_f) and tokens ~ π_{f,·}; Bonferroni over 2·|frequencies|."""
    alpha = FAMILY_ALPHA / (2 * len(tokens_by_frequency))
    failures = []
    for f, tokens in tokens_by_frequency.items():
        n = len(tokens)
        row = table.row(f)
        reported = int(np.count_nonzero(tokens))
        if stats.binomtest(reported, n, row.reported).pvalue < alpha:
            failures.append(f"reporting rate at frequency {f}")
        support = np.concatenate(([0], row.tokens))
        expected = n * np.concatenate(([1.0 - row.reported], row.probs))
        if np.any(~np.isin(tokens, support)):
            failures.append(f"token outside the support at frequency {f}")
            continue
        observed = np.array([np.count_nonzero(tokens == t) for t in support], dtype=float)
        # merge adjacent bins (in token order) until each expected count is ≥ 5
        obs_bins, exp_bins, o_acc, e_acc = [], [], 0.0, 0.0
        for o, e in zip(observed, expected):
            o_acc, e_acc = o_acc + o, e_acc + e
            if e_acc >= 5:
                obs_bins.append(o_acc), exp_bins.append(e_acc)
                o_acc = e_acc = 0.0
        if e_acc > 0 and exp_bins:
            obs_bins[-1] += o_acc
            exp_bins[-1] += e_acc
        if len(exp_bins) >= 2:
            exp_arr = np.array(exp_bins) * (sum(obs_bins) / sum(exp_bins))
            if stats.chisquare(obs_bins, exp_arr).pvalue < alpha:
                failures.append(f"token distribution at frequency {f}")
    return failures


@pytest.fixture(scope="module")
def pps_release():
    counts = {f"k{f}-{n}": f for f in FREQUENCIES for n in range(PER_FREQUENCY)}
    res = private_weighted_sample(counts, scheme="pps", tau=0.05, epsilon=0.5, delta=1e-3,
                                  max_keys_per_user=1, rng=20261129)
    return counts, res


def test_empirical_reporting_and_tokens_match_the_table(pps_release):
    counts, res = pps_release
    table = sanitizer_table(scheme="pps", tau=0.05, epsilon=0.5, delta=1e-3)
    tokens = {f: np.zeros(PER_FREQUENCY, dtype=np.int64) for f in FREQUENCIES}
    seen = defaultdict(int)
    for r in res.rows:
        f = counts[r.key]
        tokens[f][seen[f]] = r.token
        seen[f] += 1
    assert token_check(table, tokens) == []


def test_the_statistical_check_rejects_broken_samplers():
    table = sanitizer_table(scheme="pps", tau=0.05, epsilon=0.5, delta=1e-3)
    rng = np.random.default_rng(5)
    freqs = np.array(FREQUENCIES)
    # off by one frequency (rows of w+1 for a key of frequency w)
    off_by_one = {f: table.sample_tokens(np.full(PER_FREQUENCY, f + 1), rng) for f in freqs}
    assert token_check(table, off_by_one)
    # sampling ignored: the q ≡ 1 table used for a PPS release
    no_sampling = SanitizerTable(SamplingScheme("none"), epsilon=0.5, delta=1e-3)
    ignored_q = {f: no_sampling.sample_tokens(np.full(PER_FREQUENCY, f), rng) for f in freqs}
    assert token_check(table, ignored_q)
    # beyond saturation, a token that is not shifted with the frequency
    unshifted = {10**6: np.where((t := table.sample_tokens(np.full(PER_FREQUENCY, table.saturation), rng)) > 0,
                                 t + 10**6 - table.saturation - 1, 0)}
    assert token_check(table, unshifted)


def test_rows_are_valid_and_charge_one_user_level_event(pps_release):
    counts, res = pps_release
    assert all(1 <= r.token <= counts[r.key] for r in res.rows)
    # Δ = 1 here: the per-key composed accounting is one (ε, δ) event
    assert res.events == (ApproxDpEvent(epsilon=0.5, delta=1e-3, mechanism="private_weighted_sample"),)
    assert res.events == PrivateWeightedSample(scheme="pps", tau=None, epsilon=0.5, delta=1e-3).privacy_map()
    assert res.events == res.whole_release_events


def test_per_key_accounting_is_delta_times_cheaper_in_rho_and_equal_in_basic_composition():
    from stream_dp.accounting.composition import compose

    res = private_weighted_sample({"a": 50}, scheme="none", tau=None, epsilon=1.0, delta=1e-6,
                                  max_keys_per_user=4, rng=0)
    (event,) = res.events  # what the ledger is charged
    assert (event.epsilon, event.delta, event.count) == (0.25, 2.5e-7, 4)
    assert res.events == PrivateWeightedSample(scheme="none", tau=None, epsilon=1.0, delta=1e-6,
                                               max_keys_per_user=4).privacy_map()
    (whole,) = res.whole_release_events
    assert event.zcdp()[0] == pytest.approx(whole.zcdp()[0] / 4)
    assert event.zcdp()[1] == pytest.approx(whole.zcdp()[1])
    assert event.basic() == pytest.approx(whole.basic())
    compose(res.events)  # composes like any other event list
    tokens = [r.token for r in res.rows]
    assert tokens == sorted(tokens, reverse=True)


def hockey_stick(p, q, epsilon):
    return float(np.maximum(0.0, p - math.exp(epsilon) * q).sum())


@pytest.mark.parametrize("scheme,tau", [("none", None), ("pps", 0.05), ("ppswor", 0.03)])
@pytest.mark.parametrize("keys_per_user", [2, 3])
def test_user_level_calibration_composes_to_epsilon_delta(scheme, tau, keys_per_user):
    """A user touching Δ keys moves each by 1. Per-key rows at (ε/Δ, δ/Δ) are (ε/Δ, δ/Δ)-DP, so basic
    composition over the Δ independent keys gives (ε, δ); checked exactly on the product distribution.
    The uncalibrated variant (each key at the full ε, δ) is flagged by the same check."""
    epsilon, delta = 1.0, 1e-3
    cal = sanitizer_table(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta,
                          max_keys_per_user=keys_per_user, cache=SanitizerTableCache())
    assert cal.epsilon == epsilon / keys_per_user and cal.delta == delta / keys_per_user
    uncal = SanitizerTable(SamplingScheme(scheme, tau), epsilon=epsilon, delta=delta)

    def product(table, freqs):
        dist = np.ones(1)
        for f in freqs:
            dist = np.outer(dist, table.dense_row(int(f))).ravel()
        return dist

    rng = np.random.default_rng(11)
    max_f = 30 if keys_per_user == 2 else 14
    worst_cal = worst_uncal = 0.0
    for i in range(1, max_f + 1):  # per key, every pair at ε/Δ
        a, b = cal.dense_row(i), np.r_[cal.dense_row(i - 1), 0.0]
        assert max(hockey_stick(a, b, epsilon / keys_per_user), hockey_stick(b, a, epsilon / keys_per_user)) \
            <= delta / keys_per_user + 1e-12
    for _ in range(40):  # user-level: Δ keys each one higher in the neighbour with the user
        freqs = rng.integers(1, max_f + 1, size=keys_per_user)
        for table, is_cal in ((cal, True), (uncal, False)):
            with_user = product(_Padded(table, max_f), freqs)
            without = product(_Padded(table, max_f), freqs - 1)
            d = max(hockey_stick(with_user, without, epsilon), hockey_stick(without, with_user, epsilon))
            if is_cal:
                worst_cal = max(worst_cal, d)
            else:
                worst_uncal = max(worst_uncal, d)
    assert worst_cal <= delta + 1e-12
    assert worst_uncal > delta


class _Padded:
    """Rows padded to a common length so products over several keys align."""

    def __init__(self, table, max_f):
        self.table, self.max_f = table, max_f

    def dense_row(self, f):
        out = np.zeros(self.max_f + 1)
        row = self.table.dense_row(f)
        out[: len(row)] = row
        return out


def test_estimates_are_what_a_subscriber_recomputes(pps_release):
    _, res = pps_release
    tokens = sorted({r.token for r in res.rows})
    by_token = {r.token: r.estimate for r in res.rows}
    again = pws_token_estimates(tokens, **{k: v for k, v in res.parameters().items()
                                           if k in ("scheme", "tau", "epsilon", "delta", "max_keys_per_user",
                                                    "estimator")}, cache=SanitizerTableCache())
    with pytest.raises(ValueError, match="estimator"):
        pws_token_estimates([3], scheme="none", tau=None, epsilon=1.0, delta=1e-3, estimator="median")
    assert np.array_equal(again, [by_token[t] for t in tokens])


def test_output_does_not_depend_on_input_order_and_input_is_not_mutated():
    counts = {f"key{n}": int(c) for n, c in enumerate(np.random.default_rng(1).integers(0, 300, size=400))}
    reordered = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    snapshot = dict(counts)
    a = private_weighted_sample(counts, scheme="ppswor", tau=0.02, epsilon=1.0, delta=1e-6,
                                max_keys_per_user=2, rng=42)
    b = private_weighted_sample(reordered, scheme="ppswor", tau=0.02, epsilon=1.0, delta=1e-6,
                                max_keys_per_user=2, rng=42)
    assert a.rows == b.rows and counts == snapshot
    assert all(counts[r.key] >= 1 for r in a.rows)


@pytest.mark.parametrize("bad,name", [
    (dict(tau=0.0), "tau"), (dict(tau=-0.5), "tau"), (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"), (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(max_keys_per_user=0), "max_keys_per_user"), (dict(scheme="reservoir"), "scheme"),
    (dict(counts={"a": -3}), "counts"), (dict(counts={"a": 2.5}), "counts"),
])
def test_bad_parameters_raise_value_error_naming_them(bad, name):
    args = dict(counts={"a": 7, "b": 1234567}, scheme="pps", tau=0.1, epsilon=1.0, delta=1e-6,
                max_keys_per_user=1, rng=0) | bad
    with pytest.raises(ValueError, match=name) as info:
        private_weighted_sample(args.pop("counts"), **args)
    assert "1234567" not in str(info.value)

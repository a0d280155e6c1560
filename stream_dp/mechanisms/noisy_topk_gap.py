"""Noisy Top-K with Gap and its BLUE refinement (Ding et al., "Free Gap Estimates", §6).

Algorithm 4: add i.i.d. noise to every query answer, take the k+1 largest noisy answers j_1..j_{k+1}, and
release (j_i, g_i) with the *gap* g_i = q~_{j_i} − q~_{j_{i+1}} for i = 1..k. The gaps are free: releasing
them costs nothing beyond the identities (Theorem 6.1).

Noise (``epsilon`` is always the guarantee): ``monotone=True`` (counting queries, e.g. distinct-user
counts, where a neighbour moves all answers in the same direction) uses scale k/ε, otherwise 2k/ε;
``noise="laplace"`` draws Lap(scale), ``noise="exponential"`` draws Exp(scale) (mean = scale; §6.2, same
privacy), ``noise="geometric"`` draws the **discrete Laplace** (two-sided geometric) noise of the same
scale, ``P(x) ∝ e^{−|x|/scale}`` on the integers, for integer answers (counts). Each query must have
sensitivity 1. Privacy: ε-DP → one :class:`~stream_dp.accounting.events.PureDpEvent`
(:class:`NoisyTopkWithGap`, its privacy map).

**Discrete noise** (issue 16: floating-point-safe released numbers). The proof of Theorem 6.1 aligns the
noise vectors of neighbouring inputs by integer shifts (each selected answer's noise moves by at most one
unit, times the change of its count); the discrete Laplace pays exactly ``|shift|/scale`` in log-mass for an
integer shift, as Lap(scale) does in log-density, so the same ε holds. Integer noise makes ties possible:
they are broken by the input order (the public watchlist order), and the alignment maps a tie it does not
break into a tie with the same order, so the selection stays the same function of the aligned noise. The
released gaps are then differences of integers: integers, with no floating-point noise in them
(Mironov 2012). ``noise="geometric"`` requires integer values.


Noisy Top-K with Measures (§6.3, Theorem 6.2): spend ε/2 on selection with gaps and ε/2 on independent
Laplace measurements α_i = q_i + Lap(2k/ε) of the k selected answers, then combine both with the best
linear unbiased estimator :func:`blue_estimates`. Its MSE is (1+λk)/(k+λk) of the measurement's
(Corollary 1), λ = Var(gap noise)/Var(measurement noise).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from stream_dp.accounting.events import DpEvent, PureDpEvent
from stream_dp.mechanisms._validation import check_epsilon, check_positive_int, check_scores
from stream_dp.rng import RngLike, make_rng

NOISES = ("laplace", "exponential", "geometric")


def noise_scale(*, k: int, epsilon: float, monotone: bool) -> float:
    """Scale of the per-answer noise of Algorithm 4 for guarantee ε: k/ε if monotone, else 2k/ε.

    >>> noise_scale(k=5, epsilon=0.5, monotone=True), noise_scale(k=5, epsilon=0.5, monotone=False)
    (10.0, 20.0)
    """
    return (1.0 if monotone else 2.0) * k / epsilon


def _draw(noise: str, scale: float, size: int, rng: np.random.Generator) -> np.ndarray:
    if noise == "laplace":
        return rng.laplace(0.0, scale, size)
    if noise == "exponential":
        return rng.exponential(scale, size)
    if noise == "geometric":
        return discrete_laplace(scale, size, rng).astype(np.float64)
    raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")


def discrete_laplace(scale: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of the discrete Laplace noise ``P(x) ∝ e^{−|x|/scale}`` on the integers (int64).

    The difference of two i.i.d. geometric variables with success probability ``p = 1 − e^{−1/scale}`` is
    exactly this distribution (Inusah & Kozubowski 2006), drawn with integer arithmetic only.

    >>> bool((discrete_laplace(3.0, 5, np.random.default_rng(1)) % 1 == 0).all())
    True
    """
    p = -np.expm1(-1.0 / scale)
    return rng.geometric(p, size).astype(np.int64) - rng.geometric(p, size).astype(np.int64)


def noise_variance(noise: str, scale: float) -> float:
    """Variance of one noise draw: 2·b² for Lap(b), b² for Exp(b), ``2r/(1−r)²`` with ``r = e^{−1/b}`` for
    the discrete Laplace of scale b."""
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    if noise == "geometric":
        r = np.exp(-1.0 / scale)
        return float(2.0 * r / (1.0 - r) ** 2)
    return (2.0 if noise == "laplace" else 1.0) * scale**2


def _check(values: Mapping[Hashable, float], k: int, epsilon: float,
           noise: str) -> tuple[list[Hashable], np.ndarray, int, float]:
    k = check_positive_int(k, "k")
    epsilon = check_epsilon(epsilon)
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    keys, arr = check_scores(values, name="values", nonnegative=False)
    if noise == "geometric" and not np.array_equal(arr, np.floor(arr)):
        raise ValueError("noise='geometric' needs integer values (e.g. counts)")
    if len(keys) < k + 1:
        raise ValueError(f"values must hold at least k+1 = {k + 1} entries (the k-th gap needs the "
                         f"(k+1)-th answer), got {len(keys)}")
    return keys, arr, k, epsilon


def _noisy_top(arr: np.ndarray, m: int, noisy: np.ndarray) -> np.ndarray:
    """Indices of the m largest entries of ``noisy``, largest first; ties broken by input order (earlier
    first), also at the m-th place (integer noise makes ties possible)."""
    if len(noisy) > m:
        cut = np.partition(-noisy, m - 1)[m - 1]  # minus the m-th largest value
        candidates = np.flatnonzero(-noisy <= cut)  # every index that can be among the m (ties included)
    else:
        candidates = np.arange(len(noisy))
    order = candidates[np.argsort(-noisy[candidates], kind="stable")]  # stable: input order among ties
    return order[:m]


def noisy_topk_with_gap(values: Mapping[Hashable, float], *, k: int, epsilon: float, monotone: bool = True,
                        noise: str = "laplace", rng: RngLike = None) -> list[tuple[Hashable, float]]:
    """Algorithm 4: the k keys with the largest noisy answers, best first, each with its gap to the next.

    ε-DP for sensitivity-1 answers (``monotone`` as in the module docstring). Raises ``ValueError`` on
    ε ≤ 0, k < 1, fewer than k+1 values, NaN/infinite values or an unknown ``noise``.

    >>> out = noisy_topk_with_gap({"a": 1000, "b": 500, "c": 10, "d": 0}, k=2, epsilon=1.0, rng=3)
    >>> [key for key, _ in out]
    ['a', 'b']
    >>> all(gap >= 0 for _, gap in out)
    True
    """
    keys, arr, k, epsilon = _check(values, k, epsilon, noise)
    generator = make_rng(rng)
    noisy = arr + _draw(noise, noise_scale(k=k, epsilon=epsilon, monotone=monotone), len(arr), generator)
    top = _noisy_top(arr, k + 1, noisy)
    return [(keys[top[i]], float(noisy[top[i]] - noisy[top[i + 1]])) for i in range(k)]


@dataclass(frozen=True)
class NoisyTopkWithGap:
    """The noisy top-k with gap measurement (Ding et al., Algorithm 4) with its privacy map: pure ε-DP per call
    (Theorem 6.1) whatever k and the answers, so ``privacy_map()`` and ``realized(result)`` are one event.

    >>> NoisyTopkWithGap(k=2, epsilon=0.5).privacy_map()[0].zcdp()
    (0.125, 0.0)
    """

    k: int
    epsilon: float
    noise: str = "laplace"
    monotone: bool = True
    mechanism: str = "noisy_topk_with_gap"

    def __post_init__(self) -> None:
        check_positive_int(self.k, "k")
        self.privacy_map()  # validates ε

    def __call__(self, values: Mapping[Hashable, float], rng: RngLike = None) -> list[tuple[Hashable, float]]:
        return noisy_topk_with_gap(values, k=self.k, epsilon=self.epsilon, monotone=self.monotone,
                                   noise=self.noise, rng=rng)

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return (PureDpEvent(epsilon=check_epsilon(self.epsilon), mechanism=self.mechanism),)

    def realized(self, result: Sequence[tuple[Hashable, float]]) -> tuple[DpEvent, ...]:
        if len(result) > self.k:
            raise ValueError(f"{len(result)} ranked keys is not a result of noisy top-{self.k} with gap")
        return self.privacy_map()


def blue_estimates(measurements: Sequence[float], gaps: Sequence[float], *, lam: float) -> np.ndarray:
    """Best linear unbiased estimates of the k selected answers (Theorem 6.2, linear-time form).

    ``measurements`` α_1..α_k are independent unbiased measurements of the selected answers (best first),
    ``gaps`` g_1..g_{k−1} (extra trailing gaps are ignored) the noisy differences of consecutive selected
    answers, ``lam`` λ = Var(gap noise η_i) / Var(measurement noise ξ_i). With α = Σα_i,
    p = Σ_{i<k} (k−i) g_i and p_i = g_1 + … + g_i:
    β_i = (α + λkα_i + p − k·p_{i−1}) / ((1+λ)k). Post-processing: no privacy cost.

    >>> [round(float(b), 6) for b in blue_estimates([10.0, 7.0], [2.0], lam=1.0)]
    [9.75, 7.25]
    """
    alpha = np.asarray(measurements, dtype=np.float64)
    k = len(alpha)
    if k == 0:
        return alpha.copy()
    g = np.asarray(gaps, dtype=np.float64)[: k - 1]
    if len(g) < k - 1:
        raise ValueError(f"gaps must hold at least k-1 = {k - 1} entries, got {len(g)}")
    if not (np.isfinite(alpha).all() and np.isfinite(g).all()):
        raise ValueError("measurements and gaps must be finite")
    lam = check_epsilon(lam, "lam")
    p = float(np.dot(np.arange(k - 1, 0, -1, dtype=np.float64), g))
    p_prev = np.concatenate([[0.0], np.cumsum(g)])  # p_{i-1} for i = 1..k
    blue: np.ndarray = (alpha.sum() + lam * k * alpha + p - k * p_prev) / ((1.0 + lam) * k)
    return blue


def noisy_topk_with_measures(values: Mapping[Hashable, float], *, k: int, epsilon: float,
                             monotone: bool = True, noise: str = "laplace",
                             rng: RngLike = None) -> list[tuple[Hashable, float]]:
    """Noisy Top-K with Measures (§6.3): ε/2 selects k keys with gaps, ε/2 measures them with
    Lap(2k/ε) (discrete Laplace of that scale when ``noise="geometric"``: the BLUE is then a linear
    post-processing of integer releases, so it carries no floating-point noise of its own); returns (key, BLUE estimate), best first. ε-DP in total
    (cost: the :class:`NoisyTopkWithGap` map with the same ε).

    >>> out = noisy_topk_with_measures({"a": 1000, "b": 500, "c": 10, "d": 0}, k=2, epsilon=1.0, rng=3)
    >>> [key for key, _ in out]
    ['a', 'b']
    """
    keys, arr, k, epsilon = _check(values, k, epsilon, noise)
    generator = make_rng(rng)
    half = epsilon / 2
    selected = noisy_topk_with_gap(values, k=k, epsilon=half, monotone=monotone, noise=noise, rng=generator)
    index = {key: i for i, key in enumerate(keys)}
    measure_scale = k / half  # k answers of sensitivity 1: L1 sensitivity k
    chosen = np.array([index[key] for key, _ in selected])
    measure_noise = "geometric" if noise == "geometric" else "laplace"  # discrete stays discrete
    alpha = arr[chosen] + _draw(measure_noise, measure_scale, k, generator)
    lam = (noise_variance(noise, noise_scale(k=k, epsilon=half, monotone=monotone))
           / noise_variance(measure_noise, measure_scale))
    beta = blue_estimates(alpha, [gap for _, gap in selected], lam=lam)
    return [(key, float(b)) for (key, _), b in zip(selected, beta)]

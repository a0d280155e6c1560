"""Peeling exponential-mechanism oracle for limited-domain top-k (DR19 Algorithm 3, pLEM^{k,k̄}).

The production mechanism (:func:`stream_dp.mechanisms.limited_domain_topk`) is one-shot Gumbel. This module
is the reference it is tested against: the same limited domain d ∪ {⊥}, drawn one outcome at a time with
P[o] ∝ exp(ε·h_o) and stopping at ⊥ -- both as a sampler and as the exact distribution of ordered outputs,
P[(i_1..i_t)] = Π_s exp(ε h_{i_s}) / Σ_{j ∉ {i_1..i_{s-1}}} exp(ε h_j) (DR19 Corollary 4.1).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np

from stream_dp.mechanisms._validation import check_scores, kth_largest, top_indices
from stream_dp.mechanisms.limited_domain import bottom_offset

BOTTOM = "⊥"
"""Marker of the ⊥ outcome in oracle sequences."""


def limited_domain(counts: Mapping[Hashable, float], *, k_bar: int, epsilon: float, delta: float,
                   max_keys_per_user: int, bottom_offset_fn=bottom_offset) -> dict[Hashable, float]:
    """The peeling domain: the top-k̄ keys with their counts, plus :data:`BOTTOM` with h_⊥."""
    keys, values = check_scores(counts)
    domain = {keys[i]: float(values[i]) for i in top_indices(keys, values, k_bar)}
    domain[BOTTOM] = kth_largest(values, k_bar + 1) + bottom_offset_fn(
        k_bar=k_bar, epsilon=epsilon, delta=delta, max_keys_per_user=max_keys_per_user)
    return domain


def peeling_distribution(domain: Mapping[Hashable, float], *, k: int,
                         epsilon: float) -> dict[tuple[Hashable, ...], float]:
    """Exact probability of every ordered output (a tuple ending with :data:`BOTTOM` if ⊥ was drawn)."""
    out: dict[tuple[Hashable, ...], float] = {}
    top = max(domain.values())
    weights = {key: math.exp(epsilon * (value - top)) for key, value in domain.items()}

    def extend(prefix: tuple[Hashable, ...], remaining: dict[Hashable, float], p: float) -> None:
        total = sum(remaining.values())
        for key, w in remaining.items():
            q = p * w / total
            seq = prefix + (key,)
            if key == BOTTOM or len(seq) == k:
                out[seq] = out.get(seq, 0.0) + q
            else:
                rest = dict(remaining)
                del rest[key]
                extend(seq, rest, q)

    extend((), weights, 1.0)
    return out


def peeling_sample(domain: Mapping[Hashable, float], *, k: int, epsilon: float,
                   rng: np.random.Generator) -> tuple[Hashable, ...]:
    """One draw of pLEM: peel the exponential mechanism over ``domain`` up to k times, stopping at ⊥."""
    keys = list(domain)
    scores = np.array([domain[key] for key in keys])
    alive = np.ones(len(keys), dtype=bool)
    seq: list[Hashable] = []
    for _ in range(k):
        logits = np.where(alive, epsilon * scores, -np.inf)
        p = np.exp(logits - logits.max())
        i = int(rng.choice(len(keys), p=p / p.sum()))
        seq.append(keys[i])
        if keys[i] == BOTTOM:
            break
        alive[i] = False
    return tuple(seq)


def as_sequence(keys: tuple[Hashable, ...], hit_bottom: bool) -> tuple[Hashable, ...]:
    """A :class:`~stream_dp.mechanisms.TopKResult`'s output in oracle form."""
    return keys + ((BOTTOM,) if hit_bottom else ())

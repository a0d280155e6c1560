"""Randomness for mechanisms.

Every mechanism takes ``rng``: a :class:`numpy.random.Generator`, an ``int`` seed, or ``None``.
``None`` means a generator seeded from operating-system entropy (what production uses); an int seed is
for tests and simulations only.
"""

from __future__ import annotations

import secrets

import numpy as np

RngLike = np.random.Generator | int | None


def make_rng(rng: RngLike = None) -> np.random.Generator:
    """Return a Generator: ``rng`` itself, one seeded with the int, or one seeded from OS entropy.

    >>> bool(make_rng(7).integers(0, 100) == make_rng(7).integers(0, 100))
    True
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng(secrets.randbits(128))
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy.random.Generator, an int seed or None, not {type(rng).__name__}")

"""Randomness for mechanisms: a cryptographically secure generator in production, seeds for tests.

Every mechanism takes ``rng``: a :class:`numpy.random.Generator`, an ``int`` seed, or ``None``.

- ``None`` (what production uses) gives a ``numpy.random.Generator`` over **ChaCha20** (the 20-round
  stream cipher as a counter-mode bit generator, :class:`randomgen.ChaCha`) keyed with 256 bits from the
  operating system's CSPRNG (:func:`secrets.randbits`). ChaCha20's output is computationally
  indistinguishable from uniform and its key cannot be recovered from outputs, so seeing some noise draws
  (or a bit generator's *output*) tells nothing about other draws -- unlike PCG64, whose state follows from
  a few outputs and which steps backwards (issue 16). The key lives only in process memory: it is never
  logged or stored (nothing in Redis or an outbox payload lets past noise be recomputed).
- an ``int`` seed gives numpy's seeded PCG64 -- reproducible, fast, **for tests and simulations only**;
  nothing in the service passes one.
- a ``Generator`` is used as is (tests inject a seeded one; the worker hands its CSPRNG to mechanisms).

:func:`secure_rng` is the production generator with an explicit name; :func:`is_secure` tells whether a
generator is one (workers use it to refuse a non-CSPRNG generator unless explicitly in test mode).
"""

from __future__ import annotations

import secrets

import numpy as np
from randomgen import ChaCha

RngLike = np.random.Generator | int | None

CHACHA_ROUNDS = 20  # the standard ChaCha20; fewer rounds trade security for speed and are not used


def secure_rng() -> np.random.Generator:
    """A fresh ChaCha20 generator keyed from OS entropy (256-bit key, counter 0).

    >>> isinstance(secure_rng().laplace(0.0, 1.0), float)
    True
    """
    return np.random.Generator(ChaCha(key=secrets.randbits(256), counter=0, rounds=CHACHA_ROUNDS))


def is_secure(rng: np.random.Generator) -> bool:
    """True when ``rng`` draws from a full-round ChaCha bit generator (what :func:`secure_rng` builds).

    >>> is_secure(make_rng(None)), is_secure(make_rng(7))
    (True, False)
    """
    bit_generator = rng.bit_generator
    return isinstance(bit_generator, ChaCha) and bit_generator.state["state"].get("rounds") == CHACHA_ROUNDS


def make_rng(rng: RngLike = None) -> np.random.Generator:
    """Return a Generator: ``rng`` itself, a seeded one for an int (tests), or :func:`secure_rng` for None.

    >>> bool(make_rng(7).integers(0, 100) == make_rng(7).integers(0, 100))
    True
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return secure_rng()
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy.random.Generator, an int seed or None, not {type(rng).__name__}")

"""stream_dp.rng: production draws come from ChaCha20 keyed by OS entropy; seeds stay injectable."""

from __future__ import annotations

import numpy as np
import pytest
from randomgen import ChaCha

from stream_dp.mechanisms import AdaptiveSVT, noisy_topk_with_gap
from stream_dp.rng import is_secure, make_rng, secure_rng


def test_none_gives_a_fresh_chacha20_generator_each_time() -> None:
    a, b = make_rng(None), make_rng()
    assert is_secure(a) and is_secure(b)
    assert isinstance(a.bit_generator, ChaCha) and a.bit_generator.state["state"]["rounds"] == 20
    assert not np.array_equal(a.integers(0, 2**63, 8), b.integers(0, 2**63, 8))  # independent keys


def test_reduced_round_chacha_and_pcg64_are_not_called_secure() -> None:
    assert not is_secure(np.random.Generator(ChaCha(seed=1, rounds=8)))
    assert not is_secure(np.random.default_rng(1))
    assert is_secure(secure_rng())


def test_int_seeds_and_generators_stay_injectable_and_reproducible() -> None:
    assert np.array_equal(make_rng(5).laplace(0, 1, 4), make_rng(5).laplace(0, 1, 4))
    g = np.random.default_rng(3)
    assert make_rng(g) is g
    secure = secure_rng()
    assert make_rng(secure) is secure
    for bad in (True, 1.5, "7"):
        with pytest.raises(TypeError, match="rng must be"):
            make_rng(bad)  # type: ignore[arg-type]


def test_mechanisms_run_on_the_production_generator() -> None:
    svt = AdaptiveSVT(100, k=3, epsilon=1.0, noise="geometric")  # rng=None: the CSPRNG
    assert is_secure(svt._rng)
    assert [a.above for a in svt.process_many([10**6, 0])] == [True, False]
    ranked = noisy_topk_with_gap({"a": 10**6, "b": 10**5, "c": 0}, k=1, epsilon=1.0)
    assert ranked[0][0] == "a"

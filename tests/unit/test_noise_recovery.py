"""The noise-recovery attack of issue 16, run against the stored alerts state.

The attacker reads what an operator-side leak would give (the stored SVT state and the outbox envelope,
both in Redis) plus the published alerts record, and tries to recompute the query noise of the window to
turn each published gap into the exact count. Before issue 16 the stored state carried the PCG64 generator
state after the window; PCG64 steps backwards (``advance`` modulo 2**128), so rewinding it by the window's
draws regenerated every noise value and the attack recovered the counts exactly. The state now holds only
the noisy threshold and counters, so the same attack has nothing to rewind.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from stream_dp.config import AlertsConfig
from stream_dp.mechanisms import AdaptiveSVT
from stream_dp.mechanisms.svt_noise import sample_centred
from stream_dp.release.alerts import AlertsRun
from stream_dp.release.records import Envelope
from stream_dp.release.windows import Window

COUNTS = {"a": 412, "b": 260, "c": 151, "d": 133}
CFG = AlertsConfig(watchlist=tuple(COUNTS), threshold=100.0, k=10, epsilon=1.0, noise="laplace")


def recover_counts(stored: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, int] | None:
    """The attack: rewind the stored generator over the window's draws and subtract the noise from each gap.

    ``stored`` is a stored alerts state (``InstanceState.to_dict()``), ``items`` the published items of the
    window that produced it, in answer order. Returns key → recovered count, or None when the state holds
    no generator state to rewind.
    """
    svt = stored.get("svt") or {}
    saved = svt.get("rng")
    if not saved:
        return None
    bit_generator = getattr(np.random, saved["bit_generator"])()
    bit_generator.state = json.loads(saved["state"])
    per_query = 2 if svt["adaptive"] else 1  # top and middle draws
    bit_generator.advance(-(per_query * len(items)) % 2**128)
    gen = np.random.Generator(bit_generator)
    top_rate, middle_rate = svt["epsilon2"], svt["epsilon1"]  # monotone rates
    out: dict[str, int] = {}
    for item in items:
        top = sample_centred(svt["noise"], top_rate, gen) if svt["adaptive"] else 0.0
        middle = sample_centred(svt["noise"], middle_rate, gen)
        if item["above"]:
            noise = top if item["branch"] == "top" else middle
            out[item["key"]] = round(item["gap"] + svt["noisy_threshold"] - noise)
    return out


def _old_main_state(run: AlertsRun, generator: np.random.Generator) -> dict[str, Any]:
    """What old main stored after the window: the SVT state *with* the generator state (its to_state)."""
    assert run.svt is not None
    svt = {**run.svt.to_state(),
           "rng": {"bit_generator": "PCG64", "state": json.dumps(generator.bit_generator.state, sort_keys=True)}}
    return {"instance": run.instance, "scope": "p0", "svt": svt, "window": run.window.start}


def test_the_attack_recovers_the_counts_from_old_mains_stored_state() -> None:
    generator = np.random.Generator(np.random.PCG64(2026))  # old main: a PCG64 child stream per instance
    run = AlertsRun(CFG, Window(0, 3600), "p0", None, list(COUNTS), rng=generator)
    draft, _ = run.answer(dict(COUNTS))
    items = draft.to_record()["items"]
    assert all(item["above"] for item in items)
    recovered = recover_counts(_old_main_state(run, generator), items)
    print("old main: gaps", [round(i["gap"], 2) for i in items], "-> recovered", recovered)
    assert recovered == {item["key"]: COUNTS[item["key"]] for item in items}


def test_the_attack_fails_on_what_is_stored_now() -> None:
    exact, guessed = 0, 0
    for _ in range(10):  # production noise (CSPRNG): judged over several instances, not one draw
        run = AlertsRun(CFG, Window(0, 3600), "p0", None, list(COUNTS), rng=None)
        draft, state = run.answer(dict(COUNTS))
        assert state is not None and state.svt is not None
        record = draft.to_record()
        stored = [json.dumps(state.to_dict()), Envelope(record, {"alerts_state_ref": "0:ref"}).dumps()]
        for text in stored:
            for needle in ('"rng"', "bit_generator", '"seed"', '"key":', '"counter"'):
                if needle == '"key":' and text is stored[1]:
                    continue  # the record's items have a public "key" field
                assert needle not in text, needle
        assert recover_counts(state.to_dict(), record["items"]) is None
        # the noisy threshold, the one secret kept, does not give the counts either: gap + T~ is count + noise
        noisy_threshold = state.svt["noisy_threshold"]
        guesses = {i["key"]: round(i["gap"] + noisy_threshold) for i in record["items"] if i["above"]}
        guessed += len(guesses)
        exact += sum(guess == COUNTS[key] for key, guess in guesses.items())
    print("now: naive guesses exact", exact, "of", guessed)
    assert guessed >= 10 and exact <= guessed / 2, (exact, guessed)


def test_the_svt_state_is_deleted_when_the_instance_closes() -> None:
    cfg = AlertsConfig(watchlist=tuple(COUNTS), threshold=100.0, k=1, epsilon=1.0, noise="geometric")
    run = AlertsRun(cfg, Window(0, 3600), "p0", None, list(COUNTS), rng=7)
    draft, state = run.answer(dict(COUNTS))
    assert draft.info["instance_exhausted"] is True
    assert state is not None and state.svt is None and "noisy_threshold" not in json.dumps(state.to_dict())
    # the next period closes a live instance too
    live = AlertsRun(CFG, Window(0, 3600), "p0", None, list(COUNTS), rng=7).answer({})[1]
    assert live is not None and live.svt is not None
    later = AlertsRun(CFG, Window(7200, 10800), "p7200", live, [], rng=7)
    assert later.answer({})[1].svt is None  # type: ignore[union-attr]


def test_a_resumed_instance_cannot_replay_the_noise_of_the_frozen_one() -> None:
    svt = AdaptiveSVT(100, k=50, epsilon=1.0, rng=1)
    first = [svt.process(150).gap for _ in range(5)]
    resumed = AdaptiveSVT.from_state(json.loads(json.dumps(svt.to_state())))
    again = AdaptiveSVT.from_state(json.loads(json.dumps(svt.to_state())))
    assert [resumed.process(150).gap for _ in range(5)] != [again.process(150).gap for _ in range(5)]
    assert resumed.noisy_threshold == again.noisy_threshold == svt.noisy_threshold
    assert first  # the frozen instance did answer

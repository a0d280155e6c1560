"""The ledger under real concurrency and real crashes: separate OS processes, SIGKILL, Redis restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from stream_dp.accounting.budget import decide
from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import PureDpEvent
from stream_dp.processes import die_with_parent
from stream_dp.accounting.ledger import Cost, Ledger
from stream_dp.dev.devstack import DevStack
from stream_dp.store.keys import Keys
import ledger_worker as worker  # tests/integration is on sys.path (pytest rootdir-relative import)

pytestmark = pytest.mark.integration

WORKER = Path(worker.__file__)
ROOT = WORKER.parents[2]
PROCESSES = 8
CHARGES = 200


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=die_with_parent)


def _run_racers(redis_url: str, prefix: str, mode: str) -> list[list]:
    procs = [_spawn(mode, redis_url, prefix, f"p{i}", str(CHARGES)) for i in range(PROCESSES)]
    redis.Redis.from_url(redis_url).rpush(f"{prefix}:go", *["go"] * PROCESSES)  # all start together
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    return results


def _max_accepted(events, cap) -> int:
    """The most charges of ``events`` the cap allows, by the accountant's own float additions."""
    cost, total, n = Cost.of(events), Cost(), 0
    while decide((total + cost).spent(), cap) == "ok":
        total, n = total + cost, n + 1
    return n


def test_8_processes_x_200_charges_never_exceed_the_cap(redis_url):
    expected = _max_accepted(worker.RACE_EVENTS, worker.CAP)
    assert 50 < expected < PROCESSES * CHARGES / 2  # the cap binds, with plenty of refusals
    results = _run_racers(redis_url, "race", "race")
    accepted = sum(r[0] for res in results for r in res)
    refused = [r for res in results for r in res if not r[0]]
    assert accepted == expected
    assert all(r[2] in ("epsilon_cap", "delta_cap") and r[3] is None for r in refused)
    assert not any(r[1] for res in results for r in res)  # distinct ids: no duplicates
    ledger = Ledger(redis.Redis.from_url(redis_url), worker.CAP, keys=Keys("race"))
    state = ledger.remaining("day")
    assert state.epsilon_spent <= worker.CAP.epsilon and state.delta_spent <= worker.CAP.delta
    assert state.spent.rho == pytest.approx(compose(worker.RACE_EVENTS * expected).rho)
    report = ledger.verify("day")
    assert report.ok, report.problems
    assert report.charges == expected and len(ledger.unpublished("day")) == expected
    # every accepted charge's payload is stored; no refused one is
    stored = set(ledger.unpublished("day"))
    assert stored == {f"p{i}-{j}" for i, res in enumerate(results) for j, r in enumerate(res) if r[0]}


def test_same_release_ids_charged_concurrently_are_charged_once(redis_url):
    results = _run_racers(redis_url, "same", "same-id")
    ledger = Ledger(redis.Redis.from_url(redis_url), worker.CAP, keys=Keys("same"))
    for i in range(CHARGES):
        answers = [res[i] for res in results]
        assert all(a[0] for a in answers)
        assert sum(not a[1] for a in answers) == 1  # exactly one process did the charge
        assert len({a[3] for a in answers}) == 1  # everyone got the first payload
        assert answers[0][3] == ledger.stored("day", f"same-{i}")
    report = ledger.verify("day")
    assert report.ok and report.charges == CHARGES
    assert ledger.remaining("day").spent.rho == pytest.approx(compose(worker.SAME_ID_EVENTS * CHARGES).rho)


def test_sigkill_between_reserve_and_settle_keeps_the_reservation(tmp_path):
    """A process reserves then is SIGKILLed before settling; Redis is also killed and restarted (AOF,
    fsync always). The hold must still count, block what it should, and verify must pass."""
    stack = DevStack(kafka=False, workdir=tmp_path / "stack", redis_persistence=True)
    stack.start()
    try:
        url = stack.redis_url
        proc = _spawn("reserve-and-wait", url, "crash")
        try:
            line = proc.stdout.readline()  # blocks until the reservation is made (watchdog: pytest timeout)
            assert json.loads(line) == {"reserved": True}
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:  # pragma: no cover - only if an assertion above failed
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        stack.redis.kill()
        stack.redis.start()
        client = redis.Redis.from_url(url)
        ledger = Ledger(client, worker.CAP, keys=Keys("crash"))
        held = compose(worker.RESERVE_EVENTS)
        assert ledger.remaining("day").spent == held
        report = ledger.verify("day")
        assert report.ok and report.open_reservations == 1 and report.charges == 0
        # a charge that fits an empty scope but not next to the hold is refused: the hold still counts
        big = [PureDpEvent(1.5)]
        assert decide(compose(big), worker.CAP) == "ok" and decide(held + compose(big), worker.CAP) != "ok"
        assert not ledger.charge("day", "other", big).accepted
        # the restarted worker settles the same reservation id with what it actually released
        actual = [worker.RangeBoundedEvent(0.1, count=4, delta=1e-7, mechanism="limited_domain_topk")]
        settled = ledger.settle("day", "w1.topk", "w1.topk", actual, payload="TOPK")
        assert settled.accepted and settled.spent == compose(actual)
        assert ledger.charge("day", "other", big).accepted  # settling gave back the unused part of the hold
        assert ledger.verify("day").ok
        client.close()
    finally:
        stack.stop()

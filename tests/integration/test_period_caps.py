"""The cap belongs to the period (stream_dp.accounting.period_caps) against a real redis-server: a scope keeps
the cap of its first charge whatever a later worker's config says; a new period takes the new config; the
lifetime scope keeps its first cap for good; ``budget show`` prints the stored cap and ``budget verify``
fails a scope whose recomputed spend exceeds it. The broken variant -- the cap taken from each worker's
config, as before -- is run here too (its stored cap removed before every charge) and caught by verify."""

from __future__ import annotations

import json
import logging
import os

import pytest

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger import Ledger
from stream_dp.cli import main
from stream_dp.keys import Keys

pytestmark = pytest.mark.integration

KEYS = Keys("pc")
SMALL, LARGE = BudgetCap(2.0, 1e-5, 1e-7), BudgetCap(20.0, 1e-4, 1e-8)
LIFETIME_SMALL = BudgetCap(3.0, 1e-5, 1e-7, name="budget.lifetime")
LIFETIME_LARGE = BudgetCap(30.0, 1e-5, 1e-7, name="budget.lifetime")


def spend(ledger: Ledger, scope: str, n: int, eps: float = 0.5, prefix: str = "w") -> list:
    return [ledger.charge(scope, f"{prefix}{i}.topk", [PureDpEvent(eps)], payload=f"P{i}") for i in range(n)]


def test_a_later_larger_config_does_not_raise_a_charged_period(redis_client) -> None:
    first = Ledger(redis_client, SMALL, keys=KEYS)
    assert all(r.accepted for r in spend(first, "d1", 2))  # ε 1.0 of 2
    restarted = Ledger(redis_client, LARGE, keys=KEYS)  # "STREAM_DP_BUDGET__EPSILON=20"
    results = spend(restarted, "d1", 6, prefix="x")
    assert [r.accepted for r in results] == [True, True, False, False, False, False]  # up to 2.0, not 20
    assert {r.cap for r in results} == {SMALL}
    assert results[-1].reason == "epsilon_cap"
    block = results[1].budget_block("d1", restarted.cap)
    assert (block["epsilon_cap"], block["delta_cap"]) == (2.0, 1e-5)  # what the record states: the stored cap
    assert block["epsilon_spent"] == pytest.approx(2.0)
    assert restarted.remaining("d1").epsilon_remaining == pytest.approx(0.0)
    assert restarted.stored_cap("d1") == SMALL
    # the next period is charged under the config of the worker that charges it first
    assert all(r.accepted for r in spend(restarted, "d2", 6))
    assert restarted.stored_cap("d2") == LARGE and restarted.remaining("d2").cap == LARGE
    report = restarted.verify("d1")
    assert report.ok and report.cap == SMALL, report.problems


def test_a_lower_config_applies_from_the_next_period(redis_client) -> None:
    Ledger(redis_client, LARGE, keys=KEYS).charge("d1", "a", [PureDpEvent(1.0)], payload="A")
    lowered = Ledger(redis_client, SMALL, keys=KEYS)
    assert all(r.accepted and r.cap == LARGE for r in spend(lowered, "d1", 4))  # ε 3 > 2: the period's cap is 20
    assert lowered.charge("d2", "b", [PureDpEvent(1.5)]).accepted
    assert not lowered.charge("d2", "c", [PureDpEvent(1.0)]).accepted  # the new period: 2
    assert lowered.stored_cap("d2") == SMALL


def test_a_reservation_stores_the_cap_and_a_refusal_stores_nothing(redis_client) -> None:
    ledger = Ledger(redis_client, SMALL, keys=KEYS)
    assert not ledger.charge("d", "big", [PureDpEvent(5.0)]).accepted
    assert ledger.stored_cap("d") is None  # a refused charge writes nothing, not even the cap
    assert ledger.reserve("d", "r", [PureDpEvent(1.0)]).accepted
    assert ledger.stored_cap("d") == SMALL
    settled = Ledger(redis_client, LARGE, keys=KEYS).settle("d", "r", "r", [PureDpEvent(1.0)], payload="R")
    assert settled.accepted and settled.cap == SMALL


def test_the_lifetime_scope_keeps_its_first_cap_for_good(redis_client) -> None:
    first = Ledger(redis_client, LARGE, keys=KEYS, lifetime_cap=LIFETIME_SMALL)
    assert first.charge("d1", "a", [PureDpEvent(2.5)], payload="A").accepted
    later = Ledger(redis_client, LARGE, keys=KEYS, lifetime_cap=LIFETIME_LARGE)
    refused = later.charge("d2", "b", [PureDpEvent(1.0)], payload="B")  # 3.5 > the lifetime's stored 3
    assert not refused.accepted and refused.reason == "lifetime_epsilon_cap"
    assert later.stored_cap("lifetime") == LIFETIME_SMALL
    assert later.stored_cap("d2") is None  # the period refused the charge: nothing stored
    fields = {k.decode(): v.decode() for k, v in redis_client.hgetall(KEYS.ledger("d1", "cap")).items()}
    assert float(fields["lifetime_epsilon"]) == 3.0  # the period records the lifetime cap then in force


def test_a_differing_config_is_logged_once_per_scope(redis_client, caplog) -> None:
    Ledger(redis_client, SMALL, keys=KEYS).charge("d1", "a", [PureDpEvent(0.1)])
    restarted = Ledger(redis_client, LARGE, keys=KEYS)
    with caplog.at_level(logging.WARNING, logger="stream_dp.accounting.period_caps"):
        spend(restarted, "d1", 3, eps=0.1)
        restarted.remaining("d1")
        spend(restarted, "d2", 2, eps=0.1)  # charged under its own config: nothing to say
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "budget scope d1 keeps the cap it was first charged under (budget.epsilon = 2," in lines[0]
    assert "budget.epsilon = 20" in lines[0] and "from the next budget period on" in lines[0]


@pytest.fixture
def config_file(tmp_path, redis_url, monkeypatch):
    """The budget CLI's config: the LARGE cap (what a restarted worker would be configured with)."""
    from release_processes import write_config

    for name in [n for n in os.environ if n.startswith("STREAM_DP_")]:
        monkeypatch.delenv(name)
    return str(write_config(tmp_path / "c.toml", {"redis": {"url": redis_url, "key_prefix": "pc"},
                                                   "budget": {"epsilon": 20.0, "delta": 1e-4, "delta_prime": 1e-8}}))


def test_budget_show_prints_the_stored_cap_and_verify_passes(redis_client, config_file, capsys) -> None:
    spend(Ledger(redis_client, SMALL, keys=KEYS), "d1", 2)
    capsys.readouterr()
    assert main(["budget", "show", "d1", "--config", config_file, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["epsilon_cap"], row["delta_cap"], row["delta_prime"], row["cap_stored"]) == (2.0, 1e-5, 1e-7, True)
    assert row["epsilon_remaining"] == pytest.approx(1.0)
    assert main(["budget", "show", "d9", "--config", config_file]) == 0  # not charged: the config's, marked
    text = capsys.readouterr().out
    assert "20.00 (config)" in text and "not charged yet" in text
    assert main(["budget", "verify", "--config", config_file]) == 0
    assert "d1: OK (2 charges, 0 open reservations, stored cap ε 2, δ 1e-05)" in capsys.readouterr().out


def test_the_broken_variant_cap_from_config_overspends_and_verify_names_it(redis_client, config_file,
                                                                            capsys) -> None:
    """The old behaviour: each charge checked against the charging worker's own config. Simulated by
    removing the stored cap before every charge (a scope without one takes the caller's cap)."""
    spend(Ledger(redis_client, SMALL, keys=KEYS), "d1", 2)  # ε 1.0 under cap 2, stored
    restarted = Ledger(redis_client, LARGE, keys=KEYS)
    for i in range(6):
        redis_client.delete(KEYS.ledger("d1", "cap"))  # the broken variant: no cap belongs to the period
        assert restarted.charge("d1", f"x{i}.topk", [PureDpEvent(0.5)]).accepted
    redis_client.hset(KEYS.ledger("d1", "cap"), mapping={"epsilon": "2.0", "delta": "1e-05", "delta_prime": "1e-07"})
    report = restarted.verify("d1")
    assert not report.ok and report.from_log.basic_epsilon == pytest.approx(4.0)
    assert report.problems == ("spent epsilon 4 exceeds the stored cap budget.epsilon = 2 of scope d1",)
    capsys.readouterr()
    assert main(["budget", "verify", "d1", "--config", config_file]) == 1
    out = capsys.readouterr().out
    assert "d1: MISMATCH" in out and "spent epsilon 4 exceeds the stored cap budget.epsilon = 2" in out

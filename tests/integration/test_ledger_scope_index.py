"""The ledger's scope index against real redis-servers: the cached ``SADD`` (issue 21) and who relies on it.

Every scope the ledger has charged or reserved in is listed in one set (``<prefix>:{ledger}:scopes``), read by
``stream-dp budget list`` / ``verify`` and by the release worker's recovery (:meth:`Outbox.pending`). A
``Ledger`` adds a scope before its first script on that scope and then remembers it (no ``SADD`` round trip
per operation) -- at once when no replica is required, else only once :meth:`Ledger.confirm` has WAITed on
the index's master: a failover may lose an unreplicated ``SADD``, and the scope must then be added again.

``SADD`` calls are read from the server's per-command counters (``INFO commandstats``); the session's
redis-server serves only this test process, one test at a time, so their differences are this test's.
A failover that lost the index's unreplicated ``SADD`` is played by removing the scope from the index on
the master (what the promoted replica would lack); in a Redis Cluster the index and a scope live in
different slots, possibly on different masters, so the index can lose a scope whose charge survived.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from stream_dp.accounting.budget import LIFETIME_SCOPE, BudgetCap
from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger import Ledger
from stream_dp.cli import main
from stream_dp.dev.devstack import Service
from stream_dp.store.keys import Keys
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox
from stream_dp.replication import NotReplicated, ReplicationPolicy
from cluster_helpers import master_with_replica

pytestmark = pytest.mark.integration

CAP = BudgetCap(10.0, 1e-5, 1e-7)
LIFETIME = BudgetCap(100.0, 1e-5, 1e-7, name="budget.lifetime")
PREFIX = "cli"  # the prefix of the CLI's config below
KEYS = Keys(PREFIX)
INDEX = f"{PREFIX}:{{ledger}}:scopes"


def ev(eps: float = 0.1) -> list[PureDpEvent]:
    return [PureDpEvent(eps, mechanism="m")]


def sadds(client: redis.Redis) -> int:
    """How many SADDs the server has run so far."""
    return int(client.info("commandstats").get("cmdstat_sadd", {}).get("calls", 0))


def indexed(client: redis.Redis) -> set[str]:
    return {v.decode() for v in client.smembers(INDEX)}


# --- no replica required ---------------------------------------------------------------------------

def test_the_first_operation_on_a_scope_adds_it_and_later_ones_skip_the_sadd(redis_client) -> None:
    ledger = Ledger(redis_client, CAP, keys=KEYS)
    start = sadds(redis_client)
    assert ledger.charge("s", "a", ev(), payload="A").accepted
    assert sadds(redis_client) - start == 1 and indexed(redis_client) == {"s"}
    # every later operation on "s": charge, duplicate, reserve, settle, refused -- no SADD
    assert ledger.charge("s", "b", ev()).accepted
    assert ledger.charge("s", "a", ev(), payload="A").duplicate
    assert ledger.reserve("s", "c", ev(0.5)).accepted
    assert ledger.settle("s", "c", "c", ev(0.2), payload="C").accepted
    assert not ledger.charge("s", "too-much", ev(50.0)).accepted
    assert sadds(redis_client) - start == 1
    assert ledger.charge("u", "a", ev()).accepted  # a new scope: one more
    assert sadds(redis_client) - start == 2
    assert ledger.scopes() == ["s", "u"] and indexed(redis_client) == {"s", "u"}


def test_with_a_lifetime_cap_both_scopes_are_added_once(redis_client) -> None:
    ledger = Ledger(redis_client, CAP, keys=KEYS, lifetime_cap=LIFETIME)
    start = sadds(redis_client)
    assert ledger.charge("s", "a", ev()).accepted  # lifetime hold, period charge, lifetime settle
    assert sadds(redis_client) - start == 2
    assert ledger.reserve("s", "b", ev()).accepted and ledger.settle("s", "b", "b", ev()).accepted
    assert ledger.charge("s", "c", ev()).accepted
    assert sadds(redis_client) - start == 2
    assert ledger.scopes() == sorted(["s", LIFETIME_SCOPE])


def test_a_scope_that_cannot_be_indexed_is_not_charged(redis_client) -> None:
    """The SADD comes before the script: were it after, a crash (or an error) between the two would leave a
    charged scope out of the index -- invisible to ``budget list``/``verify`` and to recovery."""
    redis_client.set(INDEX, "not a set")  # every SADD on the index now fails (WRONGTYPE)
    ledger = Ledger(redis_client, CAP, keys=KEYS)
    with pytest.raises(redis.ResponseError):
        ledger.charge("s", "a", ev(), payload="A")
    assert ledger.stored("s", "a") is None and ledger.history("s") == []
    assert ledger.remaining("s").epsilon_spent == 0.0
    redis_client.delete(INDEX)
    assert ledger.charge("s", "a", ev(), payload="A").accepted  # not remembered as indexed: added now
    assert ledger.scopes() == ["s"]


def test_the_cache_is_per_process_so_a_restart_adds_the_scope_again(redis_client) -> None:
    """The documented assumption: the service never removes a scope from the index, so one process trusts
    its memory for its lifetime; a restarted process (empty memory) adds each scope again on its first
    operation -- idempotent, and it repairs an index that was lost meanwhile (e.g. restored from an old
    backup)."""
    first = Ledger(redis_client, CAP, keys=KEYS)
    assert first.charge("s", "a", ev()).accepted
    redis_client.delete(INDEX)
    start = sadds(redis_client)
    assert first.charge("s", "b", ev()).accepted
    assert sadds(redis_client) == start and indexed(redis_client) == set()  # trusted, not re-sent
    restarted = Ledger(redis_client, CAP, keys=KEYS)
    assert restarted.charge("s", "c", ev()).accepted
    assert sadds(redis_client) - start == 1 and restarted.scopes() == ["s"]
    assert restarted.charge("s", "d", ev()).accepted
    assert sadds(redis_client) - start == 1


@pytest.fixture
def config_file(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in [n for n in os.environ if n.startswith("STREAM_DP_")]:
        monkeypatch.delenv(name)
    path = tmp_path / "c.toml"
    path.write_text(f'[redis]\nurl = "{redis_url}"\nkey_prefix = "{PREFIX}"\n'
                    '[budget]\nepsilon = 10.0\ndelta = 1e-5\ndelta_prime = 1e-7\nlifetime_epsilon = 100.0\n')
    return str(path)


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_budget_list_verify_and_recovery_see_every_scope_of_every_process(redis_client, config_file, capsys) -> None:
    """Two processes charge overlapping scopes, most operations without a SADD; the CLI lists and verifies
    every scope with its true totals, and a third process's recovery finds every unpublished release."""
    a = Ledger(redis_client, CAP, keys=KEYS, lifetime_cap=LIFETIME)
    b = Ledger(redis_client, CAP, keys=KEYS, lifetime_cap=LIFETIME)
    days = ["2026-11-29", "2026-11-30", "2026-12-01"]
    start = sadds(redis_client)
    for i in range(5):
        for day in days:
            assert a.charge(day, f"a{i}", ev(), payload=f"A{i}").accepted
            assert b.charge(day, f"b{i}", ev(0.2), payload=f"B{i}").accepted
    assert sadds(redis_client) - start == 2 * (len(days) + 1)  # each process: each scope once
    rows = {r["scope"]: r for r in cli_json(capsys, "budget", "list", "--config", config_file, "--json")}
    assert set(rows) == set(days) | {LIFETIME_SCOPE}
    for day in days:
        assert rows[day]["epsilon_spent"] == pytest.approx(5 * 0.1 + 5 * 0.2)
    assert rows[LIFETIME_SCOPE]["epsilon_spent"] == pytest.approx(3 * (5 * 0.1 + 5 * 0.2))
    reports = cli_json(capsys, "budget", "verify", "--config", config_file, "--json")
    assert {r["scope"] for r in reports} == set(days) | {LIFETIME_SCOPE}
    assert all(r["ok"] for r in reports) and sum(r["charges"] for r in reports if r["scope"] in days) == 30

    third = Ledger(redis_client, CAP, keys=KEYS, lifetime_cap=LIFETIME)
    pending = Outbox(third, publisher=None, metrics=ReleaseMetrics(CollectorRegistry())).pending()  # type: ignore[arg-type]
    assert sorted(pending) == sorted((d, f"{p}{i}") for d in days for p in "ab" for i in range(5))


# --- replicas required (a master with a replica) -------------------------------------------------------

@pytest.fixture
def master_and_replica(tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    with master_with_replica(tmp_path) as pair:
        yield pair


REPLICATED = ReplicationPolicy(1, 5000)


def test_until_confirmed_every_operation_adds_the_scope_again(master_and_replica) -> None:
    master, replica = master_and_replica
    with redis.Redis(port=master.port) as m, redis.Redis(port=replica.port) as r:
        ledger = Ledger(m, CAP, keys=KEYS, replication=REPLICATED)
        start = sadds(m)
        assert ledger.charge("s", "a", ev(), payload="A").accepted
        assert ledger.charge("s", "b", ev(), payload="B").accepted
        assert sadds(m) - start == 2  # not confirmed yet: each operation re-sends the SADD
        m.srem(INDEX, "s")  # a failover lost the unreplicated SADD
        assert ledger.charge("s", "c", ev(), payload="C").accepted
        assert sadds(m) - start == 3 and ledger.scopes() == ["s"]  # ... and the next operation added it again
        ledger.confirm("s", "c")  # its index fence carries one more SADD, in the same round trip
        assert {v.decode() for v in r.smembers(INDEX)} == {"s"}  # on the replica, no waiting needed
        confirmed = sadds(m)
        assert ledger.charge("s", "d", ev(), payload="D").accepted
        assert ledger.reserve("s", "e", ev()).accepted
        assert sadds(m) == confirmed  # confirmed: skipped from now on


def test_confirm_leaves_the_scope_in_the_index_even_if_a_failover_had_lost_it(master_and_replica) -> None:
    """The SADD made before a charge is lost with the index's master before confirm(); the WAIT then runs on
    the promoted master (which has a replica again) and succeeds. confirm() is what lets later operations
    skip the SADD -- so the scope must be in the index it confirmed, or it stays out of ``budget list``,
    ``verify`` and recovery for this process's life (for a period scope: for good)."""
    master, replica = master_and_replica
    with redis.Redis(port=master.port) as m, redis.Redis(port=replica.port) as r:
        writer = Ledger(m, CAP, keys=KEYS, lifetime_cap=LIFETIME, replication=REPLICATED)
        assert writer.charge("s", "a", ev(), payload="A").accepted
        m.srem(INDEX, "s", LIFETIME_SCOPE)  # the unreplicated SADDs are gone, the charge (another slot) is not
        writer.confirm("s", "a")
        assert writer.charge("s", "b", ev(), payload="B").accepted
        assert writer.scopes() == sorted(["s", LIFETIME_SCOPE])
        assert {v.decode() for v in r.smembers(INDEX)} == {"s", LIFETIME_SCOPE}

        # another process that only publishes a release it found stored (it never SADDed "t" itself)
        writer.charge("t", "a", ev(), payload="A")
        m.srem(INDEX, "t")
        publisher = Ledger(m, CAP, keys=KEYS, lifetime_cap=LIFETIME, replication=REPLICATED)
        publisher.confirm("t", "a")
        assert publisher.charge("t", "b", ev(), payload="B").accepted
        assert "t" in publisher.scopes() and "t" in {v.decode() for v in r.smembers(INDEX)}


def test_a_scope_indexed_ahead_is_not_added_again_by_its_first_operation(redis_client) -> None:
    """What the idle release worker does for the window it expects next: the new period's first operations
    skip the SADD and can be queued (``queueable``), as in any later window of the period."""
    ledger = Ledger(redis_client, CAP, keys=KEYS)
    assert not ledger.queueable("next", ev())
    start = sadds(redis_client)
    ledger.index_ahead("next")
    ledger.index_ahead("next")  # once per scope
    assert sadds(redis_client) - start == 1 and "next" in indexed(redis_client)
    assert ledger.queueable("next", ev())
    assert ledger.reserve("next", "a", ev()).accepted
    assert ledger.charge("next", "b", ev(), payload="B").accepted
    assert sadds(redis_client) - start == 1
    assert ledger.scopes() == ["next"]
    with pytest.raises(ValueError, match="scope"):
        ledger.index_ahead("a{b}")


def test_with_replicas_a_scope_counts_as_indexed_ahead_only_once_replicated(master_and_replica) -> None:
    master, replica = master_and_replica
    with redis.Redis(port=master.port) as m, redis.Redis(port=replica.port) as r:
        ledger = Ledger(m, CAP, keys=KEYS, replication=REPLICATED)
        ledger.index_ahead("next")
        assert {v.decode() for v in r.smembers(INDEX)} == {"next"}  # on the replica when it returns
        start = sadds(m)
        assert ledger.charge("next", "a", ev(), payload="A").accepted
        assert sadds(m) == start and ledger.queueable("next", ev())

        # two replicas required, one exists: the WAIT falls short, the scope is not taken as indexed
        strict = Ledger(m, CAP, keys=KEYS, replication=ReplicationPolicy(2, 50))
        with pytest.raises(NotReplicated):
            strict.index_ahead("later")
        assert not strict.queueable("later", ev())
        start = sadds(m)
        assert strict.reserve("later", "a", ev()).accepted
        assert sadds(m) - start == 1  # its first operation adds it itself

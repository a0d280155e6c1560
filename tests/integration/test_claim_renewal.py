"""``WindowClaims.renew_if_due`` against a real redis-server: the lease is renewed only once a third of its TTL
has passed since this worker last set or renewed it, never for a claim another worker took, and a loss
reaches the release worker as :class:`ClaimLost` (counted as ``errors_total{kind="claim_lost"}``).

Time is controlled, never slept: the claim module's monotonic clock is replaced by :class:`FakeClock`, and
what Redis did is read back -- the key's PTTL (shortened by the test first, so a renewal shows as a longer
PTTL) and the server's per-command call counters (``INFO commandstats``: the renewal is one ``EVALSHA``
whose script runs ``PEXPIRE``). The session's redis-server serves only this test process, one test at a
time, so the counters' differences are this test's commands.
"""

from __future__ import annotations

import json
import types
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

import stream_dp.release.claim as claim_module
from stream_dp.accounting.ledger import BudgetCap, Ledger
from stream_dp.config import Config, config_from_mapping
from stream_dp.store.keys import Keys
from stream_dp.store.scripts import script_text
from stream_dp.release.claim import Claim, ClaimLost, WindowClaims
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox
from stream_dp.release.worker import ReleaseWorker
from tests.support.windows import set_watermark, write_window

pytestmark = pytest.mark.integration

KEYS = Keys("t")
TTL_S = 30.0  # the claim TTL of these tests; due after TTL_S / 3 = 10 s
DUE_S = TTL_S / 3
SHORT_MS = 5_000  # the PTTL a test leaves on a claim key, well below TTL_S: a renewal shows as PTTL > SHORT_MS


class FakeClock:
    """Stands in for the ``time`` module inside :mod:`stream_dp.release.claim` (only ``monotonic`` is used)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(claim_module, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server has run ``command`` (scripts' inner calls included)."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


class RoundTrips:
    """Counts the renewal's commands between two points: ``EVALSHA``/``EVAL`` sent and ``PEXPIRE`` run."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        # the renewal script in the server's cache first: a first EVALSHA refused with NOSCRIPT (and sent
        # again after SCRIPT LOAD) would count as two
        client.script_load(script_text("claim_renew"))
        self.start = self._now()

    def _now(self) -> tuple[int, int]:
        return calls(self.client, "evalsha") + calls(self.client, "eval"), calls(self.client, "pexpire")

    def since(self) -> tuple[int, int]:
        """(scripts sent, PEXPIREs run) since this counter was made."""
        now = self._now()
        return now[0] - self.start[0], now[1] - self.start[1]


def shorten(client: redis.Redis, claim: Claim) -> None:
    """Leave the claim key with a PTTL of SHORT_MS (as if Redis had counted most of its TTL down)."""
    assert client.pexpire(claim.key, SHORT_MS)


def pttl(client: redis.Redis, claim: Claim) -> int:
    return int(client.pttl(claim.key))


def test_not_due_before_a_third_of_the_ttl_sends_nothing(redis_client, clock) -> None:
    claims = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    claim = claims.acquire(0)
    assert claim is not None
    shorten(redis_client, claim)
    trips = RoundTrips(redis_client)
    for elapsed in (0.0, 1.0, DUE_S / 2, DUE_S - 0.001):
        clock.now = 1_000.0 + elapsed
        claims.renew_if_due(claim)
    assert trips.since() == (0, 0)  # no round trip at all
    assert 0 < pttl(redis_client, claim) <= SHORT_MS  # and so the lease was not extended
    assert redis_client.get(claim.key) == claim.token.encode()


def test_due_at_a_third_of_the_ttl_extends_the_lease_by_the_whole_ttl(redis_client, clock) -> None:
    claims = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    claim = claims.acquire(0)
    assert claim is not None
    shorten(redis_client, claim)
    clock.advance(DUE_S)  # exactly a third: due
    trips = RoundTrips(redis_client)
    claims.renew_if_due(claim)
    assert trips.since() == (1, 1)  # one script, one PEXPIRE
    assert pttl(redis_client, claim) > SHORT_MS  # extended to (about) the full TTL again
    assert pttl(redis_client, claim) <= TTL_S * 1000
    assert redis_client.get(claim.key) == claim.token.encode()


def test_a_renewal_restarts_the_count_towards_the_next_one(redis_client, clock) -> None:
    claims = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    claim = claims.acquire(0)
    assert claim is not None
    clock.advance(DUE_S + 5)
    claims.renew_if_due(claim)  # renewed at t0 + 15 s
    shorten(redis_client, claim)
    trips = RoundTrips(redis_client)
    clock.advance(DUE_S - 0.001)  # 9.999 s after the renewal (25 s after the SET): not due again yet
    claims.renew_if_due(claim)
    assert trips.since() == (0, 0) and pttl(redis_client, claim) <= SHORT_MS
    clock.advance(0.001)  # a third of the TTL after the renewal: due
    claims.renew_if_due(claim)
    assert trips.since() == (1, 1) and pttl(redis_client, claim) > SHORT_MS


def test_an_explicit_renew_also_restarts_the_count(redis_client, clock) -> None:
    claims = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    claim = claims.acquire(0)
    assert claim is not None
    clock.advance(DUE_S + 1)
    claims.renew(claim)
    trips = RoundTrips(redis_client)
    clock.advance(1.0)
    claims.renew_if_due(claim)
    assert trips.since() == (0, 0)


def test_a_claim_this_instance_never_set_is_renewed_at_once(redis_client, clock) -> None:
    """No record of when it was set (e.g. acquired by an earlier WindowClaims of this worker): its age is
    unknown, so it is renewed rather than assumed fresh."""
    first = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    claim = first.acquire(0)
    assert claim is not None
    shorten(redis_client, claim)
    later = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    trips = RoundTrips(redis_client)
    later.renew_if_due(claim)  # the clock has not moved at all
    assert trips.since() == (1, 1) and pttl(redis_client, claim) > SHORT_MS


def test_a_claim_taken_by_another_worker_is_not_renewed_and_the_loss_is_raised(redis_client, clock) -> None:
    a = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    b = WindowClaims(redis_client, keys=KEYS, worker_id="b", ttl_seconds=TTL_S)
    ca = a.acquire(0)
    assert ca is not None
    redis_client.delete(ca.key)  # a's claim expired (a was paused) ...
    cb = b.acquire(0)  # ... and b took the window, with a larger fence
    assert cb is not None and cb.fence > ca.fence and cb.key == ca.key
    shorten(redis_client, cb)
    clock.advance(DUE_S)
    trips = RoundTrips(redis_client)
    with pytest.raises(ClaimLost, match=ca.token):
        a.renew_if_due(ca)
    assert trips.since() == (1, 0)  # the script ran, found b's token and did not PEXPIRE
    assert redis_client.get(cb.key) == cb.token.encode()  # b's claim untouched ...
    assert 0 < pttl(redis_client, cb) <= SHORT_MS  # ... and its lease not extended by a
    with pytest.raises(ClaimLost):  # a failed renewal is not remembered as one: still lost on the next call
        a.renew_if_due(ca)
    assert b.held(cb) and not a.held(ca)


def test_an_expired_claim_nobody_took_is_not_recreated(redis_client, clock) -> None:
    a = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    ca = a.acquire(0)
    assert ca is not None
    redis_client.delete(ca.key)  # expired, no other worker yet
    clock.advance(DUE_S)
    with pytest.raises(ClaimLost):
        a.renew_if_due(ca)
    assert not redis_client.exists(ca.key)  # the window is free for any worker, a did not take it back


def test_a_claim_lost_before_it_is_due_goes_unnoticed_until_the_fenced_mark(redis_client, clock) -> None:
    """Before a third of the TTL a claim cannot have expired, so renew_if_due does not look; a claim lost
    anyway (a flushed key, a failover) is caught by the fenced released mark instead (tested end to end in
    :func:`test_the_worker_reports_a_claim_lost_before_renewal_was_due_at_the_fenced_mark`)."""
    a = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=TTL_S)
    b = WindowClaims(redis_client, keys=KEYS, worker_id="b", ttl_seconds=TTL_S)
    ca = a.acquire(0)
    assert ca is not None
    redis_client.delete(ca.key)
    cb = b.acquire(0)
    assert cb is not None
    shorten(redis_client, cb)
    trips = RoundTrips(redis_client)
    clock.advance(DUE_S / 2)
    a.renew_if_due(ca)  # not due: no round trip, so no way (and no attempt) to notice
    assert trips.since() == (0, 0)
    assert redis_client.get(cb.key) == cb.token.encode() and pttl(redis_client, cb) <= SHORT_MS


# --- through the release worker ------------------------------------------------------------------

SIZE = 60


class HookPublisher:
    """Collects records; runs ``on_publish(n)`` after the n-th record is collected (1-based)."""

    def __init__(self, on_publish: Any = None) -> None:
        self.records: list[dict[str, Any]] = []
        self.on_publish = on_publish

    def publish(self, record: dict[str, Any]) -> None:
        self.records.append(json.loads(json.dumps(record)))
        if self.on_publish is not None:
            self.on_publish(len(self.records))

    def close(self) -> None:
        pass


def two_type_cfg() -> Config:
    """top-k then sample: the worker calls renew_if_due before each, so twice per window."""
    return config_from_mapping({
        "redis": {"key_prefix": "t"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 600, "start": "0"},
        "budget": {"epsilon": 1e9, "delta": 1e-3, "delta_prime": 1e-7, "period_seconds": 86400},
        "releases": {"topk": {"enabled": True, "k": 3, "k_bar": 10, "epsilon": 1000.0, "delta": 1e-6},
                     "alerts": {"enabled": False}, "histogram": {"enabled": False},
                     "sample": {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 2.0, "delta": 1e-6}},
    }, environ={})


def make_worker(redis_client, cfg: Config, publisher: HookPublisher, worker_id: str
                ) -> tuple[ReleaseWorker, CollectorRegistry, Ledger]:
    registry = CollectorRegistry()
    ledger = Ledger(redis_client, BudgetCap.from_config(cfg.budget), keys=Keys(cfg.redis.key_prefix))
    metrics = ReleaseMetrics(registry)
    outbox = Outbox(ledger, publisher, metrics)  # type: ignore[arg-type]
    worker = ReleaseWorker(cfg, redis_client, ledger, outbox, metrics, worker_id=worker_id,
                           claim_ttl_seconds=TTL_S, rng=1)
    return worker, registry, ledger


def claim_lost_count(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("stream_dp_release_errors_total", {"kind": "claim_lost"}) or 0.0


def windows_released(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("stream_dp_release_windows_total") or 0.0


def one_window(redis_client) -> None:
    write_window(redis_client, KEYS, 0, SIZE, {f"k{j}": float(100 * j) for j in range(1, 30)})
    set_watermark(redis_client, KEYS, SIZE)


def take_over(redis_client, start: int, other: WindowClaims) -> Claim:
    """Another worker takes the window's claim (the holder's claim having expired)."""
    redis_client.delete(KEYS.window_claim(start))
    taken = other.acquire(start)
    assert taken is not None
    return taken


def released_marked(redis_client) -> bool:
    return redis_client.zscore(KEYS.release_index("released"), "0") is not None


def finish_with_b(redis_client, cfg: Config, a_records: list[dict[str, Any]], taken: Claim, b_claims: WindowClaims
                  ) -> None:
    """Worker b (whose claim expires, as b's process would have ended) finishes the window: it publishes the
    stored records again, unchanged (no re-roll), and every release id was charged once."""
    b_claims.drop(taken)
    pub_b = HookPublisher()
    worker_b, registry_b, ledger_b = make_worker(redis_client, cfg, pub_b, "b")
    assert worker_b.run_once() is not None
    assert windows_released(registry_b) == 1 and released_marked(redis_client)
    assert [r["type"] for r in pub_b.records] == ["topk", "sample"]
    for old in a_records:  # what a published is exactly what b published for that type
        assert next(r for r in pub_b.records if r["type"] == old["type"]) == old
    (scope,) = ledger_b.scopes()
    charged = [e.id for e in ledger_b.history(scope) if e.type in ("charge", "settle")]
    assert sorted(charged) == sorted(set(charged)) and len(charged) == 2
    assert ledger_b.verify(scope).ok


def test_the_worker_reports_a_claim_lost_when_renewal_was_due(redis_client, clock) -> None:
    cfg = two_type_cfg()
    one_window(redis_client)
    b_claims = WindowClaims(redis_client, keys=KEYS, worker_id="b", ttl_seconds=TTL_S)
    taken: list[Claim] = []

    def after_publish(n: int) -> None:
        if n == 1:  # after top-k: a stalls past its lease, b takes the window over
            clock.advance(TTL_S)
            taken.append(take_over(redis_client, 0, b_claims))

    pub = HookPublisher(after_publish)
    worker, registry, _ = make_worker(redis_client, cfg, pub, "a")
    assert worker.run_once() is None  # gave the window up ...
    assert claim_lost_count(registry) == 1  # ... and said why
    assert [r["type"] for r in pub.records] == ["topk"]  # the sample was not started under a lost claim
    assert windows_released(registry) == 0 and not released_marked(redis_client)
    assert redis_client.get(taken[0].key) == taken[0].token.encode()  # a's drop left b's claim alone
    finish_with_b(redis_client, cfg, pub.records, taken[0], b_claims)


def test_the_worker_reports_a_claim_lost_before_renewal_was_due_at_the_fenced_mark(redis_client, clock) -> None:
    cfg = two_type_cfg()
    one_window(redis_client)
    b_claims = WindowClaims(redis_client, keys=KEYS, worker_id="b", ttl_seconds=TTL_S)
    taken: list[Claim] = []

    def after_publish(n: int) -> None:
        if n == 1:  # the claim vanishes early (not through expiry: e.g. a failover); the clock barely moves
            clock.advance(1.0)
            taken.append(take_over(redis_client, 0, b_claims))

    pub = HookPublisher(after_publish)
    worker, registry, _ = make_worker(redis_client, cfg, pub, "a")
    trips = RoundTrips(redis_client)
    assert worker.run_once() is None
    assert trips.since()[1] == 0  # renew_if_due sent no PEXPIRE in the whole release (never due)
    assert claim_lost_count(registry) == 1  # the fenced released mark refused a's token
    assert [r["type"] for r in pub.records] == ["topk", "sample"]
    assert windows_released(registry) == 0 and not released_marked(redis_client)
    assert redis_client.get(taken[0].key) == taken[0].token.encode()
    finish_with_b(redis_client, cfg, pub.records, taken[0], b_claims)


def test_the_worker_renews_a_held_claim_between_types_once_due(redis_client, clock) -> None:
    cfg = two_type_cfg()
    one_window(redis_client)
    seen: list[int] = []

    def after_publish(n: int) -> None:
        if n == 1:  # top-k took longer than a third of the lease; a's claim is still its own
            clock.advance(DUE_S)
            key = KEYS.window_claim(0)
            assert redis_client.pexpire(key, SHORT_MS)
            seen.append(calls(redis_client, "pexpire"))

    pub = HookPublisher(after_publish)
    worker, registry, _ = make_worker(redis_client, cfg, pub, "a")
    trips = RoundTrips(redis_client)
    assert worker.run_once() is not None
    assert claim_lost_count(registry) == 0 and windows_released(registry) == 1
    # the only PEXPIRE besides the test's own ran after top-k (the renewal before the sample); none before
    assert trips.since()[1] == 2 and seen and calls(redis_client, "pexpire") - seen[0] == 1

"""Claiming a window for release: a Redis lock with a fencing token and an expiry.

Several release workers may run (failover; README, Operations). Before releasing a window a worker claims it:

- the **fencing token** comes from one monotone counter (``INCR`` on ``Keys.release_index("fence")``), so
  every claim carries a token no other claim had (drawn just before the claim's ``SET``, by the worker's
  poll for the window it guesses next: tokens are ordered by when they were drawn, and a token drawn for a
  window that was not claimed is never used);
- the claim is ``SET <window claim> <token> NX PX <ttl>``: at most one holder at a time, and a dead holder's
  claim expires after ``ttl``;
- the holder renews it (``PEXPIRE`` only if the value is still its token) between steps -- once a third of
  the TTL has passed since it last set or renewed it (:meth:`WindowClaims.renew_if_due`; before that the
  claim cannot have expired, so the round trip would buy nothing) -- and every
  state change that ends the release of a window (:meth:`WindowReader.mark_released`) runs in one Lua script
  that first checks the token -- a worker paused past its expiry cannot mark a window another worker owns.

What makes a duplicate *harmless* is not the lock but the ledger: a release id is charged and stored once,
and a worker that lost a race publishes the stored record (no re-roll). The lock keeps two workers from
doing the work twice and from both running mechanisms on one window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from stream_dp.errors import StreamDPError
from stream_dp.node_batches import Reads, RideAlong, run_batched
from stream_dp.store import scripts
from stream_dp.store.keys import Keys

class ClaimLost(RuntimeError, StreamDPError):
    """The worker no longer holds the window's claim (it expired and another worker may own it)."""


@dataclass(frozen=True)
class Claim:
    """A held claim: the window start, the claim key and the fencing token."""

    start: int
    key: str
    token: str

    @property
    def fence(self) -> int:
        """The numeric fencing token (monotone across all claims)."""
        return int(self.token.rsplit(":", 1)[1])


class WindowClaims:
    """Claims on windows for one worker (``worker_id`` appears in the token, for operators)."""

    def __init__(self, client: redis.Redis, *, keys: Keys, worker_id: str, ttl_seconds: float = 30.0) -> None:
        # ttl_seconds > 0: release.claim_ttl_seconds (and --claim-ttl-seconds) are validated by the config
        if ":" in worker_id:
            raise ValueError(f"worker_id must not contain ':', got {worker_id!r}")
        self.r = client
        self.keys = keys
        self.worker_id = worker_id
        self.ttl_ms = int(ttl_seconds * 1000)
        self._renew = scripts.register(client, "claim_renew")
        self._drop = scripts.register(client, "claim_drop")
        self._set_at: dict[str, float] = {}  # token -> monotonic time before its last SET / PEXPIRE was sent

    @property
    def scripts(self) -> tuple:
        """The claim's Lua scripts (renew, drop), loaded when the worker starts."""
        return (self._renew, self._drop)

    def acquire(self, start: int) -> Claim | None:
        """Claim the window starting at ``start``; None if another worker holds it.

        Two round trips: ``EXISTS`` and the fence ``INCR`` in one batch (a fence drawn while another worker
        holds the claim is simply never used: tokens stay monotone), then ``SET NX PX``."""
        return self.acquire_then_read(start, RideAlong())

    def precheck_reads(self, start: int) -> Reads:
        """The claim's first step for the window starting at ``start`` -- ``EXISTS`` on its claim and a fence
        ``INCR`` -- as commands to send with another round trip (the worker's poll); parses to
        ``(held, fence)`` for :meth:`acquire_then_read`'s ``prechecked``. A fence drawn and never used (the
        window was not the one to claim, or was held) leaves the tokens monotone."""
        key = self.keys.window_claim(start)
        fence_key = self.keys.release_index("fence")
        return Reads([(key, lambda pipe: pipe.exists(key)), (fence_key, lambda pipe: pipe.incr(fence_key))],
                     lambda replies: (bool(replies[0]), int(replies[1])))

    def acquire_then_read(self, start: int, ride: RideAlong,
                          prechecked: tuple[bool, int] | None = None) -> Claim | None:
        """:meth:`acquire`, with the reads queued on ``ride`` sent right *after* the ``SET NX PX``, in its
        round trip (on one Redis the same pipeline, so they run once the claim is set; on a cluster after
        it, :meth:`RideAlong.run`). Their results are the window's as seen under the claim -- meaningful
        only when a claim is returned (else they were read while another worker may hold it: ignore them).
        What is queued there runs whether or not the claim is won, so a write must be one any worker may
        send for the window (top-k's reservation: idempotent per release id, ``WindowRelease._lead_in_claim``).
        ``prechecked``: the first step's ``(held, fence)`` when it was sent earlier (:meth:`precheck_reads`)."""
        key = self.keys.window_claim(start)
        if prechecked is None:
            reads = self.precheck_reads(start)
            prechecked = reads.parse(run_batched(self.r, reads.items))
        held, fence = prechecked
        if held:
            return None
        token = f"{self.worker_id}:{int(fence)}"
        sent = time.monotonic()
        # the GET makes the step safe to send twice (a batch whose scripts Redis lacked is sent again,
        # :func:`~stream_dp.node_batches.run_with_scripts`): the fence is fresh, so the token is ours alone
        ok, holder = ride.run(self.r, [(key, lambda pipe: pipe.set(key, token, nx=True, px=self.ttl_ms)),
                                       (key, lambda pipe: pipe.get(key))])
        if ok or (holder is not None and holder.decode() == token):
            self._set_at[token] = sent
            return Claim(start, key, token)
        return None

    def renew(self, claim: Claim) -> None:
        """Extend the claim's expiry; raise :class:`ClaimLost` if it is no longer ours."""
        sent = time.monotonic()
        if not self._renew(keys=[claim.key], args=[claim.token, self.ttl_ms]):
            raise ClaimLost(f"claim on window {claim.start} (token {claim.token}) expired or was taken over")
        self._set_at[claim.token] = sent

    def renew_if_due(self, claim: Claim) -> None:
        """:meth:`renew`, once a third of the TTL has passed since this worker set or last renewed the claim.

        Before that the claim cannot have expired: Redis counts its TTL from when it ran the ``SET`` /
        ``PEXPIRE``, which is after the (monotonic) time noted here just before sending it. What protects a
        release is unchanged: the fenced released mark, and the ledger's one charge per release id."""
        sent = self._set_at.get(claim.token)
        if sent is None or time.monotonic() - sent >= self.ttl_ms / 3000.0:
            self.renew(claim)

    def held(self, claim: Claim) -> bool:
        raw = self.r.get(claim.key)
        return raw is not None and (raw if isinstance(raw, str) else raw.decode()) == claim.token

    def drop(self, claim: Claim) -> bool:
        """Give the claim up (only if still ours)."""
        self._set_at.pop(claim.token, None)
        return bool(self._drop(keys=[claim.key], args=[claim.token]))

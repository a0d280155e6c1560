"""Claiming a window for release: a Redis lock with a fencing token and an expiry.

Several release workers may run (failover; README, Operations). Before releasing a window a worker claims it:

- the **fencing token** comes from one monotone counter (``INCR`` on ``Keys.release_index("fence")``), so a
  later claim always carries a larger token than an earlier one;
- the claim is ``SET <window claim> <token> NX PX <ttl>``: at most one holder at a time, and a dead holder's
  claim expires after ``ttl``;
- the holder renews it (``PEXPIRE`` only if the value is still its token) between steps, and every
  state change that ends the release of a window (:meth:`WindowReader.mark_released`) runs in one Lua script
  that first checks the token -- a worker paused past its expiry cannot mark a window another worker owns.

What makes a duplicate *harmless* is not the lock but the ledger: a release id is charged and stored once,
and a worker that lost a race publishes the stored record (no re-roll). The lock keeps two workers from
doing the work twice and from both running mechanisms on one window.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from stream_dp.keys import Keys

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_DROP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class ClaimLost(RuntimeError):
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
        self._renew = client.register_script(_RENEW)
        self._drop = client.register_script(_DROP)

    def acquire(self, start: int) -> Claim | None:
        """Claim the window starting at ``start``; None if another worker holds it."""
        key = self.keys.window_claim(start)
        if self.r.exists(key):
            return None
        fence = int(self.r.incr(self.keys.release_index("fence")))
        token = f"{self.worker_id}:{fence}"
        if self.r.set(key, token, nx=True, px=self.ttl_ms):
            return Claim(start, key, token)
        return None

    def renew(self, claim: Claim) -> None:
        """Extend the claim's expiry; raise :class:`ClaimLost` if it is no longer ours."""
        if not self._renew(keys=[claim.key], args=[claim.token, self.ttl_ms]):
            raise ClaimLost(f"claim on window {claim.start} (token {claim.token}) expired or was taken over")

    def held(self, claim: Claim) -> bool:
        raw = self.r.get(claim.key)
        return raw is not None and raw.decode() == claim.token

    def drop(self, claim: Claim) -> bool:
        """Give the claim up (only if still ours)."""
        return bool(self._drop(keys=[claim.key], args=[claim.token]))

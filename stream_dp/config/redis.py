"""``[redis]``: where the state lives, its auth and TLS, and how many replicas must acknowledge a write --
read by :mod:`stream_dp.connections` and :mod:`stream_dp.replication`."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, SecretStr, StrictInt, StrictStr

from stream_dp.config.fields import AUTO_REPLICAS, AtLeastOne, Flag, Positive, Str, auto_or_at_least, must_be, section
from stream_dp.redact import redact_url


class RedisUrl(str):
    """``redis.url``: a plain string everywhere (clients, f-strings), but its ``repr`` -- what a dump of the
    config shows -- masks the password a URL may carry (:func:`stream_dp.redact.redact_url`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(redact_url(str(self)))


@section
class RedisConfig:
    # empty: start the embedded dev-stack redis-server; rediss:// for TLS
    url: Annotated[StrictStr, must_be(lambda v: v == "" or v.startswith(("redis://", "rediss://", "unix://")),
                                      "empty or a redis://, rediss:// or unix:// URL"),
                   AfterValidator(RedisUrl)] = RedisUrl("")
    key_prefix: Annotated[StrictStr, must_be(lambda v: bool(v) and "{" not in v,
                                             "a non-empty string without braces")] = "sdp"
    username: Str = ""
    password: SecretStr = SecretStr("")  # secret: repr and logs show '**********' (stream_dp.redact)
    ssl_ca_certs: Str = ""
    socket_timeout_seconds: Positive = 5.0
    allow_eviction: Flag = False  # run even if Redis's maxmemory-policy may evict keys (see connections.py)
    cluster: Flag = False  # redis.url names any node of a Redis Cluster: every process uses the cluster client
    # Replicas that must acknowledge a write the service acts on (a ledger charge before its release is
    # published) -- WAIT, see stream_dp/replication.py. "auto": 1 when the deployment has replicas, else 0.
    min_replicas_acked: Annotated[StrictStr | StrictInt, auto_or_at_least(
        0, f'"{AUTO_REPLICAS}" or an integer >= 0')] = AUTO_REPLICAS
    replication_timeout_ms: AtLeastOne = 1000  # how long one WAIT may block before it counts as an outage

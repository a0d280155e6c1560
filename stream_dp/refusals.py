"""Failures that waiting cannot heal: the process stops with one line naming what to fix, and exit code 2.

The workers retry what heals by itself -- a broker or a Redis that is down, a failover -- with capped
backoff. Some failures never heal: Redis refusing the credentials, the broker refusing SASL, Redis having
lost the state the service acted on. Retrying those forever hides them behind a stream of warnings; a
traceback hides them behind frames. A :class:`Refusal` carries the one line an operator needs (the setting
or the command); :func:`stream_dp.runtime.run_worker` logs it and exits with
:data:`~stream_dp.runtime.ExitCode.CONFIG` (2). :func:`refusal_of` recognises the permanent client errors.
"""

from __future__ import annotations

from typing import Any

import redis

from stream_dp.errors import StreamDPError


class Refusal(RuntimeError, StreamDPError):
    """A failure retrying cannot heal; the message names the setting to fix or the command to run."""


class CredentialsRefused(Refusal):
    """Redis or the broker refused this process's credentials (or its permissions)."""


#: Error names that mean the broker refused the SASL credentials or this principal's permissions.
KAFKA_AUTH_ERRORS = ("SaslAuthenticationFailedError", "UnsupportedSaslMechanismError", "IllegalSaslStateError",
                     "TopicAuthorizationFailedError", "GroupAuthorizationFailedError",
                     "ClusterAuthorizationFailedError")
#: librdkafka's error names for the same (confluent-kafka's KafkaError.name()).
CONFLUENT_AUTH_ERRORS = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "TOPIC_AUTHORIZATION_FAILED",
                         "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")


def redis_refusal(exc: BaseException, url: str = "") -> CredentialsRefused | None:
    """The refusal for a Redis error that is about credentials or permissions (None: anything else).

    >>> str(redis_refusal(redis.AuthenticationError("invalid username-password pair"), "redis://h:6379/0"))
    'Redis at redis://h:6379/0 refused the credentials (invalid username-password pair): check redis.password (and redis.username)'
    >>> redis_refusal(redis.ConnectionError("Connection refused")) is None
    True
    """
    where = f" at {url}" if url else ""
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.AuthenticationWrongNumberOfArgsError)):
        return CredentialsRefused(f"Redis{where} refused the credentials ({exc}): check redis.password "
                                  "(and redis.username)")
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return CredentialsRefused(f"Redis{where} refused a command to this user ({exc}): grant redis.username "
                                  "the commands and keys of redis.key_prefix")
    return None


def kafka_refusal(exc: BaseException, bootstrap: str = "") -> CredentialsRefused | None:
    """The refusal for a Kafka client error about SASL credentials or authorisation (kafka-python's error
    classes, or confluent-kafka's error names), None for anything else."""
    confluent = getattr(exc.args[0], "name", None) if exc.args else None  # a confluent KafkaError inside
    code = confluent() if callable(confluent) else None
    if type(exc).__name__ in KAFKA_AUTH_ERRORS or code in CONFLUENT_AUTH_ERRORS:
        where = f" ({bootstrap})" if bootstrap else ""
        return CredentialsRefused(f"the Kafka broker{where} refused this client ({type(exc).__name__}: {exc}): "
                                  "check kafka.sasl_mechanism, kafka.sasl_username, kafka.sasl_password and the "
                                  "principal's ACLs")
    return None


def refusal_of(exc: BaseException, *, redis_url: str = "", bootstrap: str = "") -> Refusal | None:
    """``exc`` itself when it is a :class:`Refusal`, else the refusal a permanent client error means."""
    if isinstance(exc, Refusal):
        return exc
    return redis_refusal(exc, redis_url) or kafka_refusal(exc, bootstrap)


def is_permanent(exc: Any) -> bool:
    """Whether retrying ``exc`` is pointless (a :class:`Refusal` or a permanent client error)."""
    return isinstance(exc, BaseException) and refusal_of(exc) is not None

"""How the ingest loop classifies a failed step: which dependency it came from (retried with backoff), or
none (raised: a bug, or a refusal that waiting cannot heal), and the words of its log line."""

from __future__ import annotations

from kafka.errors import KafkaError

from stream_dp.ingest.applier import ApplyFailed
from stream_dp.ingest.dead_letters import DeadLetterUnavailable


def is_transient(exc: BaseException) -> str | None:
    """The dependency a retriable error came from (``"redis"`` / ``"kafka"``), or None if not retriable."""
    if isinstance(exc, ApplyFailed):  # Redis is the applier's: its errors arrive as failed outcomes
        return exc.dependency
    if isinstance(exc, KafkaError):
        return "kafka"
    return None


def describe_failure(dependency: str, exc: BaseException) -> str:
    """What failed, naming the real cause: Redis, the broker, or the dead-letter topic (not a bad record:
    records that cannot be dead-lettered as is are written in bounded form, never retried)."""
    if isinstance(exc, ApplyFailed):
        return f"redis unavailable ({exc})" if dependency == "redis" else f"applier failed ({exc})"
    if isinstance(exc, DeadLetterUnavailable):
        return str(exc)
    return f"Kafka broker unavailable ({type(exc).__name__}: {exc})" if dependency == "kafka" else \
        f"{dependency} failed ({type(exc).__name__}: {exc})"

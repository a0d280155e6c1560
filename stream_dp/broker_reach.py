"""Whether a kafka-python client reaches any broker, for callers whose polls return nothing while it does not.

kafka-python reconnects to unreachable brokers by itself, and a ``poll`` meanwhile raises nothing: it just
returns no records, exactly as when nothing was published. The client's ``connection-count`` metric (its
``consumer-metrics`` group) tells the two apart: it is 0 while no connection to any broker is open, and
right after a poll -- in which the client would have reconnected to a broker that answers -- 0 means none
answers. The ingest loop (:class:`stream_dp.ingest.consumers.KafkaPythonConsumer`) and the subscriber
client (:meth:`stream_dp.client.ReleaseSubscriber.unreachable`, the dashboard's health) ask it after an
empty poll. Only ``kafka`` is imported here: the subscriber client uses this module without the service's
dependencies.
"""

from __future__ import annotations

from typing import Any

from kafka.errors import KafkaConnectionError, KafkaTimeoutError

from stream_dp.errors import StreamDPError

#: What :meth:`BrokerReach.unreachable` says while no broker answers (names the setting to check).
NO_BROKER = "no connection to any broker of kafka.bootstrap_servers"

#: What a kafka-python client raises when no broker of its bootstrap list answers at start (within its
#: ``bootstrap_timeout_ms``).
BOOTSTRAP_ERRORS = (KafkaTimeoutError, KafkaConnectionError)


class BrokerUnreachable(ConnectionError, StreamDPError):
    """No broker of ``kafka.bootstrap_servers`` answered when a client started. The message names the setting
    and the address, so a command prints it as its one line (``stream-dp tail`` and ``replay`` exit with 2)."""


def unreachable(bootstrap: str) -> BrokerUnreachable:
    """The error for a client that could not reach ``bootstrap`` (raise it ``from None``: the client's own
    error is a timeout that says less).

    >>> str(unreachable("127.0.0.1:1"))
    'no Kafka broker answers at 127.0.0.1:1 (kafka.bootstrap_servers): is it running, and is the address right?'
    """
    return BrokerUnreachable(f"no Kafka broker answers at {bootstrap} (kafka.bootstrap_servers): is it running, "
                             "and is the address right?")


class BrokerReach:
    """Reads one kafka-python client's ``connection-count`` metric (looked up once: reading it takes a
    fraction of a microsecond, while ``metrics()`` builds every metric's value, about half an empty poll)."""

    def __init__(self, client: Any) -> None:
        raw = client.metrics(raw=True) or {}  # None when the client keeps no metrics (metrics_enabled=False)
        self._connections = next((metric for name, metric in raw.items()
                                  if name.group == "consumer-metrics" and name.name == "connection-count"), None)

    def unreachable(self) -> str | None:
        """:data:`NO_BROKER` while the client holds no connection to any broker, else None (None also for a
        client without metrics: nothing to tell from). Ask right after a poll that returned nothing; a
        connection slower than one poll reads as unreachable for that poll."""
        if self._connections is None or self._connections.value() > 0:
            return None
        return NO_BROKER

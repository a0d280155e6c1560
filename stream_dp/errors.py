"""The root of every exception stream-dp raises on purpose: :class:`StreamDPError`.

Each exception class of the package derives from it and keeps the built-in (or client-library) base it had
(``ValueError`` for bad input or configuration, ``ConnectionError`` for a component out of reach,
``RuntimeError`` for a state the process cannot continue from, kafka-python's ``KafkaError`` for Kafka I/O),
so ``except ValueError`` and its kind keep working. ``except StreamDPError`` tells one of stream-dp's named
failures -- each message names the setting or input at fault, never a raw count or a secret -- from a bug.

This module imports nothing (:class:`ConfigError` lives here for that reason), so the pure mechanisms can use it without loading any I/O or settings code.
tests/unit/test_errors.py walks every module of the package and checks that each public exception class
derives from the root.
"""

from __future__ import annotations


class StreamDPError(Exception):
    """Base class of every public exception defined in :mod:`stream_dp`."""


class ConfigError(ValueError, StreamDPError):
    """A setting is missing, unknown, of the wrong type, or out of its allowed range (the message names the
    setting and, when one set it, the environment variable). Defined here, not in :mod:`stream_dp.config`, so
    code that only raises it (the numpy-only accounting and mechanisms) does not load pydantic;
    ``stream_dp.config.ConfigError`` is the same class."""

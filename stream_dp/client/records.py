"""One release record checked: a ``schema_version`` this client reads, and the JSON schema shipped with the
package (``config/release.schema.json``, a copy in ``stream_dp/defaults``).

An unknown version raises :class:`UnsupportedSchemaVersion` (a newer producer is never misread silently);
a message that is not a record following the schema is an :class:`InvalidReleaseRecord`, which the default
``on_invalid`` (:func:`report_invalid`) logs and skips.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from stream_dp.errors import StreamDPError

log = logging.getLogger(__name__)

SUPPORTED_SCHEMA_VERSIONS: frozenset[int] = frozenset({1})
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "defaults" / "release.schema.json"


class ReleaseRecordError(ValueError, StreamDPError):
    """A message on the releases topic that this client will not hand out as a release record."""

    def __init__(self, message: str, *, release_id: str | None = None, where: str | None = None) -> None:
        super().__init__(message + (f" (at {where})" if where else ""))
        self.release_id = release_id
        self.where = where


class UnsupportedSchemaVersion(ReleaseRecordError):
    """The record declares a ``schema_version`` this client does not know (a newer or foreign producer)."""


class InvalidReleaseRecord(ReleaseRecordError):
    """Not JSON, not an object, or not following the release schema."""


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def release_types() -> tuple[str, ...]:
    """The release types the shipped schema knows (``type`` enum), e.g. ``("topk", "alerts", …)``."""
    return tuple(_validator().schema["properties"]["type"]["enum"])


def check_record(value: bytes | str | dict[str, Any], *, where: str | None = None) -> dict[str, Any]:
    """The release record in ``value`` (a message value or a decoded dict), checked.

    Raises :class:`UnsupportedSchemaVersion` if its ``schema_version`` is not one of
    :data:`SUPPORTED_SCHEMA_VERSIONS`, :class:`InvalidReleaseRecord` if it is not a JSON object following
    the schema. The version is checked first, so a newer record is reported as newer, not as invalid.
    """
    if isinstance(value, dict):
        record = value
    else:
        try:
            record = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidReleaseRecord(f"message is not JSON ({exc.__class__.__name__})", where=where) from None
        if not isinstance(record, dict):
            raise InvalidReleaseRecord(f"message is JSON but not an object ({type(record).__name__})", where=where)
    rid = record.get("release_id")
    rid = rid if isinstance(rid, str) else None
    version = record.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS or isinstance(version, bool):
        supported = ", ".join(str(v) for v in sorted(SUPPORTED_SCHEMA_VERSIONS))
        raise UnsupportedSchemaVersion(
            f"release record {rid or '(no release_id)'} has schema_version {version!r}; this stream-dp client "
            f"reads schema_version {supported} only (upgrade stream-dp to read newer records)",
            release_id=rid, where=where)
    errors = sorted(_validator().iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.absolute_path) or "(the record)"
        raise InvalidReleaseRecord(
            f"release record {rid or '(no release_id)'} does not follow the release schema: {path}: {first.message}",
            release_id=rid, where=where)
    return record


def report_invalid(error: ReleaseRecordError) -> None:
    """The default ``on_invalid``: an unknown schema version stops the reader (raise); a malformed record is
    logged and skipped (a dead message must not stop every subscriber)."""
    if isinstance(error, UnsupportedSchemaVersion):
        raise error
    log.warning("skipped a message on the releases topic: %s", error)

"""Keep secrets out of everything the service prints: config dumps, log lines, error messages.

Secrets are the settings named in :data:`SECRET_SETTINGS` (passwords, SASL secrets) and the credentials
inside any URL (``scheme://user:password@host`` — ``redis.url`` may carry the Redis password). They are
replaced by ``***`` (an empty secret stays empty, so "not set" remains visible).

- :func:`redact_url` / :func:`redact_text` clean one string (every URL in it, and every registered value);
- :func:`redacted_config` is the config as a dict with the secrets masked (``stream-dp config check``);
- :class:`RedactingFilter` cleans every log record (message, arguments and exception text) before any
  handler formats it; :func:`install` puts it on the root logger's handlers and registers the secret
  values of a loaded config, so even a message that quotes a password verbatim is masked.
"""

from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"

# dotted settings whose whole value is secret
SECRET_SETTINGS: tuple[str, ...] = ("kafka.sasl_password", "redis.password")
# dotted settings that may hold URLs with credentials
URL_SETTINGS: tuple[str, ...] = ("redis.url", "kafka.bootstrap_servers")

# scheme://[user[:password]@]host -- the userinfo part ends at the last '@' before the host
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/@]*)@")

_registered: set[str] = set()


def redact_url(url: str) -> str:
    """Mask the password of every ``scheme://user:password@`` in ``url`` (a bare ``scheme://secret@``, as
    Redis allows, is masked whole).

    >>> redact_url("rediss://:hunter2@cache:6380/0"), redact_url("redis://app:pw@h/1"), redact_url("redis://h")
    ('rediss://:***@cache:6380/0', 'redis://app:***@h/1', 'redis://h')
    """
    def mask(m: re.Match[str]) -> str:
        userinfo = m.group("userinfo")
        if not userinfo:
            return m.group(0)
        user, sep, _password = userinfo.partition(":")
        masked = f"{user}:{MASK}" if sep else MASK
        return f"{m.group('scheme')}{masked}@"

    return _URL_CREDENTIALS.sub(mask, url)


def register_secret(value: str) -> None:
    """Mask ``value`` wherever it appears in later log lines (ignored when shorter than 4 characters: a
    1-3 character "secret" would mask ordinary text and protect nothing)."""
    if isinstance(value, str) and len(value) >= 4:
        _registered.add(value)


def redact_text(text: str) -> str:
    """``text`` with URL credentials and every registered secret masked."""
    text = redact_url(text)
    for secret in sorted(_registered, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _secret_values(cfg: Any) -> list[str]:
    values = []
    for dotted in SECRET_SETTINGS:
        section, name = dotted.split(".")
        secret = getattr(getattr(cfg, section), name)  # a pydantic SecretStr
        values.append(secret.get_secret_value() if hasattr(secret, "get_secret_value") else secret)
    for dotted in URL_SETTINGS:
        section, name = dotted.split(".")
        url = getattr(getattr(cfg, section), name)
        for m in _URL_CREDENTIALS.finditer(url):
            _user, sep, password = m.group("userinfo").partition(":")
            values.append(password if sep else m.group("userinfo"))
    return [v for v in values if v]


def register_config_secrets(cfg: Any) -> None:
    """Register the secret values of a loaded :class:`~stream_dp.config.Config` for log masking."""
    for value in _secret_values(cfg):
        register_secret(value)


def redacted_config(cfg: Any) -> dict[str, Any]:
    """``cfg.to_dict()`` with secret settings masked and URL credentials removed."""
    data = cfg.to_dict()
    for dotted in SECRET_SETTINGS:
        section, name = dotted.split(".")
        if data[section][name]:
            data[section][name] = MASK
    for dotted in URL_SETTINGS:
        section, name = dotted.split(".")
        data[section][name] = redact_url(data[section][name])
    return data


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (arguments merged) and exception text with :func:`redact_text`."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is left to the handler to report
            return True
        cleaned = redact_text(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact_text(text)
            record.exc_info = None
            record.msg = f"{record.msg}\n{record.exc_text}"
            record.exc_text = None
        return True


def _redacting_excepthook(exc_type: Any, exc: Any, tb: Any) -> None:
    """An uncaught exception's traceback, masked, on stderr (what Python would print, minus secrets)."""
    import sys
    import traceback

    sys.stderr.write(redact_text("".join(traceback.format_exception(exc_type, exc, tb))))


def install(cfg: Any = None) -> None:
    """Add a :class:`RedactingFilter` to every handler of the root logger (once each), mask uncaught
    tracebacks too, and, given a config, register its secrets."""
    import sys

    if cfg is not None:
        register_config_secrets(cfg)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _redacting_excepthook

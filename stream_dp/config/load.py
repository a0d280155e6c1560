"""The entry points: :func:`load_config` (a TOML file plus the environment), :func:`config_from_mapping` (a
mapping plus the environment) and :func:`with_settings` (a loaded config with one section changed, checked
like a file's values)."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from stream_dp.config.messages import config_error
from stream_dp.config.model import SECTIONS, Config
from stream_dp.config.sources import OVERRIDES, Settings, environment_overrides
from stream_dp.errors import ConfigError
from stream_dp.renamed_settings import in_effect, shadowed_by

# The default file ships inside the package (stream_dp/defaults/stream-dp.toml is a symlink to
# config/stream-dp.toml in the source tree; wheels carry a copy), so a non-editable install finds it too.
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "defaults" / "stream-dp.toml"


def config_from_mapping(data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> Config:
    """Build and validate a :class:`Config` from a nested mapping plus environment overrides.

    >>> cfg = config_from_mapping({"releases": {"topk": {"k": 5}}}, environ={"STREAM_DP_RELEASES__TOPK__K_BAR": "50"})
    >>> (cfg.releases.topk.k, cfg.releases.topk.k_bar)
    (5, 50)
    """
    overrides, applied = environment_overrides(os.environ if environ is None else environ)
    data = shadowed_by(dict(data), set(applied))  # an environment variable overrides either name of a renamed key
    for name, value in data.items():
        if name in SECTIONS and not isinstance(value, Mapping) and not dataclasses.is_dataclass(value):
            raise ConfigError(f"{name} must be a table, got {type(value).__name__}")
    token = OVERRIDES.set(overrides)
    try:
        settings = Settings(**_deep_copy(data))
    except ValidationError as exc:
        raise config_error(exc, applied) from None
    finally:
        OVERRIDES.reset(token)
    return Config(**{name: getattr(settings, name) for name in SECTIONS})


def with_settings(config: Config, section: str, **changes: Any) -> Config:
    """``config`` with settings of one section changed, validated like a file's values (a failure is a
    :class:`ConfigError` naming the setting, e.g. a command-line flag's)."""
    data = in_effect(config.to_dict())
    data[section].update(changes)
    return config_from_mapping(data, environ={})


def load_config(path: str | os.PathLike[str] | None = None, *,
                environ: Mapping[str, str] | None = None) -> Config:
    """Load a TOML config file (default: the packaged ``config/stream-dp.toml``), apply env overrides, validate."""
    data: dict[str, Any] = {}
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    if path is not None:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file {os.fspath(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {os.fspath(path)!r} is not valid TOML: {exc}") from None
    return config_from_mapping(data, environ=environ)


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}

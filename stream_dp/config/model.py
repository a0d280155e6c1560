"""The whole configuration: :class:`Config`, one field per section (each section's class lives with the
settings of its subsystem in this package), and :meth:`Config.to_dict`, the plain mapping a config file is
written from (secrets revealed: writing a child process's config file needs them; a dump for a person goes
through :func:`stream_dp.redact.redacted_config`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import SecretStr

from stream_dp.config.budget import BudgetConfig
from stream_dp.config.fields import section
from stream_dp.config.histogram import ReleasesConfig
from stream_dp.config.kafka import KafkaConfig
from stream_dp.config.redis import RedisConfig
from stream_dp.config.service import DashboardConfig, IngestConfig, MetricsConfig, ReleaseConfig
from stream_dp.config.stream import ContributionConfig, EventsConfig, KeysConfig, WindowsConfig


@section
class Config:
    kafka: KafkaConfig = dataclasses.field(default_factory=KafkaConfig)
    redis: RedisConfig = dataclasses.field(default_factory=RedisConfig)
    events: EventsConfig = dataclasses.field(default_factory=EventsConfig)
    keys: KeysConfig = dataclasses.field(default_factory=KeysConfig)
    windows: WindowsConfig = dataclasses.field(default_factory=WindowsConfig)
    contribution: ContributionConfig = dataclasses.field(default_factory=ContributionConfig)
    ingest: IngestConfig = dataclasses.field(default_factory=IngestConfig)
    release: ReleaseConfig = dataclasses.field(default_factory=ReleaseConfig)
    budget: BudgetConfig = dataclasses.field(default_factory=BudgetConfig)
    releases: ReleasesConfig = dataclasses.field(default_factory=ReleasesConfig)
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)
    dashboard: DashboardConfig = dataclasses.field(default_factory=DashboardConfig)

    def replace(self, **sections: Any) -> Config:
        """A copy with whole sections replaced (tests and the demo use this)."""
        return dataclasses.replace(self, **sections)

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain TOML-able values: secrets revealed, ``redis.url`` a plain ``str``."""
        data: dict[str, Any] = _plain(dataclasses.asdict(self))
        return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, str):
        return str(value)
    return value


#: The sections, in file order.
SECTIONS = tuple(f.name for f in dataclasses.fields(Config))

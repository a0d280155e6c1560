"""The demo's settings: the options of ``stream-dp demo`` (:class:`DemoOptions`), and the config it runs --
demo-sized defaults over the default file, the generated catalogue as a public domain, and the final config
written as TOML for the worker processes.

**What the demo releases, and why** (the project's release-choice table, README "Choosing a release type";
``tests/unit/test_demo_config.py`` checks the table still says so): the generated stream has ~1,050 users a
day, Δ = 5 (``contribution.max_keys_per_user``), one-day windows, each its own budget period, and a public
catalogue -- every movie title the generator can emit, fixed by ``--movies`` and ``--seed`` before any rating
is drawn. For that cell the table's best type is the histogram with the exact-profile calibration over the
domain: every catalogue key gets a noisy count, no threshold needed, and the exact calibration is the one
to use for a period of one window (docs/privacy.md §8c). The default config's histogram (zcdp calibration,
no domain) is the choice for many windows per period; limited-domain top-k stays one setting away
(``STREAM_DP_RELEASES__TOPK__ENABLED=true``).

The catalogue is public for the demo's generated stream only: a file of yours (``--csv``) has no catalogue
the demo could know, so its releases find keys by the histogram's threshold.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_dp.config import Config, config_from_mapping, load_config
from stream_dp.renamed_settings import in_effect


@dataclass
class DemoOptions:
    """What ``stream-dp demo`` was asked for: the config, the stream (generated, or a file and its columns),
    its pacing, when to stop, and the ports and directory to use."""

    config_path: str | None = None
    input_path: str | None = None  # None: the generated stream
    input_format: str | None = None
    user_column: str | None = None
    key_column: str | None = None
    time_column: str | None = None
    time_unit: str = "s"
    seed: int = 7
    days: int = 28
    users: int = 6000
    movies: int = 3000
    seconds_per_window: float = 3.0  # pacing: one window of event time per this many seconds
    speedup: float | None = None  # explicit event-time speed-up (overrides seconds_per_window)
    fast: bool = False  # no pacing at all
    windows: int | None = None  # stop after this many windows were released
    duration: float | None = None  # stop after this many seconds
    metrics_port: int = 9108  # ingest gets this port, release the next one (or free ports if taken)
    workdir: str | None = None  # keep the generated config and logs here
    color: bool = False
    dashboard: bool = True  # also serve `stream-dp dashboard` (a subscriber of the releases topic)
    dashboard_port: int | None = None  # None: dashboard.port of the config (8050); a free port if taken


# Demo-sized defaults, used only when no --config is given (environment overrides still win): the
# generated stream has ~8,000 ratings by ~1,050 users a day, so one-day windows (= one budget period each)
# give the top movies a few hundred distinct users each; one window per period: the exact calibration.
DEMO_DEFAULTS: dict[str, dict[str, Any]] = {
    "windows": {"size_seconds": 86400, "idle_partition_timeout_seconds": 5.0},
    "releases.histogram": {"calibration": "exact"},
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def config_to_toml(config: Config, header: str = "") -> str:
    """The config as a TOML document that :func:`load_config` reads back to an equal config."""
    lines = [f"# {line}" for line in header.splitlines()]

    def table(name: str, data: Mapping[str, Any]) -> None:
        # None: an unset deprecated setting (stream_dp/renamed_settings.py), which TOML has no value for
        scalars = {k: v for k, v in data.items() if not isinstance(v, Mapping) and v is not None}
        if scalars:
            lines.append(f"\n[{name}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in scalars.items())
        for k, v in data.items():
            if isinstance(v, Mapping):
                table(f"{name}.{k}", v)

    for section, data in in_effect(config.to_dict()).items():
        table(section, data)
    return "\n".join(lines).lstrip("\n") + "\n"


def demo_config(config_path: str | None, environ: Mapping[str, str] | None = None) -> Config:
    """The demo's starting config: the file given, or the default file with :data:`DEMO_DEFAULTS` under env
    (a dotted name such as ``releases.histogram`` is a nested table)."""
    if config_path is not None:
        return load_config(config_path, environ=environ)
    import tomllib

    from stream_dp.config import DEFAULT_CONFIG_PATH

    data = tomllib.loads(DEFAULT_CONFIG_PATH.read_text()) if DEFAULT_CONFIG_PATH.exists() else {}
    for dotted, values in DEMO_DEFAULTS.items():
        table = data
        for part in dotted.split("."):
            table = table.setdefault(part, {})
        table.update(values)
    return config_from_mapping(data, environ=environ)


def catalogue_domain(cfg: Config, path: Path, *, movies: int, seed: int) -> tuple[Config, str]:
    """``cfg`` with the generated stream's catalogue (every title :func:`~stream_dp.dev.demo_data.movie_titles`
    makes for ``movies`` and ``seed``, written to ``path``) as ``releases.histogram.domain_file``, and the line
    the demo prints about it. Unchanged (and no line) when the histogram is off or has a domain already.

    The catalogue holds every key the stream can emit, so a domain learned from earlier releases
    (``domain_from_released``, on by default for a stream without a catalogue) could add no key to it: it is
    turned off, and each record's ``domain`` block says the catalogue alone (``{"size": n, "static": n}``)."""
    from stream_dp.dev.demo_data import movie_titles

    h = cfg.releases.histogram
    if not h.enabled or h.domain or h.domain_file:
        return cfg, ""
    titles = movie_titles(movies, seed)
    path.write_text("".join(f"{t}\n" for t in titles), encoding="utf-8")
    histogram = dataclasses.replace(h, domain_file=str(path), domain_from_released=False)
    said = (f"domain     the generated catalogue's {len(titles):,} movie titles (releases.histogram.domain_file = "
            f"{path}): public, fixed by --movies and --seed before any rating, so each gets a noisy count"
            + ("; every key the stream can emit, so nothing to learn from earlier releases "
               "(releases.histogram.domain_from_released off)" if h.domain_from_released else ""))
    return cfg.replace(releases=dataclasses.replace(cfg.releases, histogram=histogram)), said

"""``stream-dp dashboard``: a live trending page and JSON API over the releases topic (a subscriber only)."""

from __future__ import annotations

import argparse
import sys

EXAMPLES = """\
examples:
  stream-dp dashboard --config config/stream-dp.toml          # http://127.0.0.1:8050/
  # on a wall screen: http://127.0.0.1:8050/?wall=1 (large type; automatic from 1920 px wide)
  STREAM_DP_DASHBOARD__HOST=0.0.0.0 stream-dp dashboard --config prod.toml
  curl 'http://127.0.0.1:8050/api/releases?type=topk&limit=5'
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard", help="serve a live trending page and JSON API over the releases topic",
        description="Subscribe to the releases topic (schema-checked, de-duplicated records; no Redis, no raw "
        "counts) and serve a page with the live ranking (counts, rank changes, each key's rank over the last "
        "windows), the rising keys, alerts with their confidence bounds, samples, the budget (ε left, "
        "burn-down, earlier periods) and the window timeline, plus a JSON API (/api/releases, /api/trending, "
        "/api/budget, /api/timeline, /healthz) and Server-Sent Events (/api/stream). Binds dashboard.host "
        "(default loopback) and dashboard.port (default 8050).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="TOML config (default: config/stream-dp.toml)")
    p.add_argument("--topic", help="releases topic (default: kafka.releases_topic)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    # kafka-python logs its own reconnects; the feed reports broker trouble itself (log and /healthz)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    # like every command: an empty kafka.bootstrap_servers is taken from a running `stream-dp devstack`
    # (the dashboard is a subscriber: it reads the releases topic only, never Redis)
    from stream_dp.dashboard.server import PortTaken, bind, serve
    from stream_dp.runtime import ExitCode, load_config_or_report

    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    if not cfg.kafka.bootstrap_servers:
        print("config error: kafka.bootstrap_servers is empty; set it or STREAM_DP_KAFKA__BOOTSTRAP_SERVERS, or "
              "start `stream-dp devstack up`", file=sys.stderr)
        return ExitCode.CONFIG
    try:
        sock = bind(cfg.dashboard.host, cfg.dashboard.port)
    except PortTaken as exc:
        print(f"dashboard error: {exc}; set another port (0: any free one)", file=sys.stderr)
        return 1
    topic = args.topic or cfg.kafka.releases_topic

    def ready(url: str) -> None:
        print(f"dashboard  {url}  (releases topic {topic} at {cfg.kafka.bootstrap_servers}; Ctrl-C stops)",
              flush=True)

    return serve(cfg, topic=topic, sock=sock, on_ready=ready)

"""``stream-dp demo``: broker + Redis + ingest and release workers + a replayed stream, live releases."""

from __future__ import annotations

import argparse
import sys

EXAMPLES = """\
examples:
  stream-dp demo                          # generated MovieLens-style ratings, until Ctrl-C
  stream-dp demo --windows 4              # stop by itself after four windows were released
  stream-dp demo --no-dashboard           # without the live page (http://127.0.0.1:8050/ by default)
  STREAM_DP_RELEASES__TOPK__ENABLED=true stream-dp demo   # limited-domain top-k next to the histogram
  # MovieLens' ratings.csv (https://grouplens.org/datasets/movielens/), replayed in event-time order:
  # yearly windows, a larger Δ
  STREAM_DP_WINDOWS__SIZE_SECONDS=31536000 STREAM_DP_CONTRIBUTION__MAX_KEYS_PER_USER=20 \\
    stream-dp demo --csv ml-latest-small/ratings.csv --user-column userId --key-column movieId \\
    --time-column timestamp
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the whole service locally and print live releases",
        description="Start a broker and Redis (embedded, unless kafka.bootstrap_servers / redis.url are "
        "configured), start the ingest and release workers as processes with the same entry points and "
        "config code path as production, replay a MovieLens-style stream (generated, or your CSV/JSONL) "
        "and print every release -- by default the histogram (over the generated stream's public catalogue): "
        "every key's noisy count with its interval -- with each release's cost and its budget period. "
        "Ctrl-C stops everything cleanly.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="TOML config (default: config/stream-dp.toml with demo-sized windows)")
    src = p.add_argument_group("input (default: the generated MovieLens-style stream)")
    src.add_argument("--csv", "--input", dest="input_path", metavar="FILE",
                     help="replay this CSV/JSONL file (.gz allowed) instead, in event-time order")
    src.add_argument("--format", dest="input_format", choices=("csv", "jsonl"))
    src.add_argument("--user-column", help="column with the user id (default: events.user_field)")
    src.add_argument("--key-column", help="column with the key (default: events.key_field)")
    src.add_argument("--time-column", help="column with the event time (default: events.time_field)")
    src.add_argument("--time-unit", choices=("s", "ms", "us", "ns"), default="s")
    gen = p.add_argument_group("generated stream")
    gen.add_argument("--seed", type=int, default=7, help="(default: %(default)s)")
    gen.add_argument("--days", type=int, default=28, help="(default: %(default)s)")
    gen.add_argument("--users", type=int, default=6000, help="(default: %(default)s)")
    gen.add_argument("--movies", type=int, default=3000, help="(default: %(default)s)")
    pace = p.add_argument_group("pacing and bounds")
    pace.add_argument("--seconds-per-window", type=float, default=3.0,
                      help="replay one window of event time per this many seconds (default: %(default)s)")
    pace.add_argument("--speedup", type=float, help="explicit event-time speed-up factor instead")
    pace.add_argument("--fast", action="store_true", help="replay as fast as possible")
    pace.add_argument("--windows", type=int, metavar="N", help="stop after N windows were released")
    pace.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    p.add_argument("--metrics-port", type=int, default=9108,
                   help="ingest /metrics port; release uses the next one; taken ports are replaced by free "
                   "ones (default: %(default)s)")
    p.add_argument("--no-dashboard", dest="dashboard", action="store_false",
                   help="do not serve the live dashboard (stream-dp dashboard) next to the demo")
    p.add_argument("--dashboard-port", type=int, metavar="PORT",
                   help="dashboard port (default: dashboard.port, 8050; a free port if it is taken)")
    p.add_argument("--workdir", help="keep the generated config and worker logs in this directory")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stream_dp.config import ConfigError
    from stream_dp.dev.demo import Demo, DemoOptions, install_sigint
    from stream_dp.dev.devstack import DevStackError
    from stream_dp.replay import ReplayError

    for name in ("windows", "duration", "seconds_per_window", "speedup"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            print(f"demo error: --{name.replace('_', '-')} must be > 0, got {value}", file=sys.stderr)
            return 2
    options = DemoOptions(
        config_path=args.config, input_path=args.input_path, input_format=args.input_format,
        user_column=args.user_column, key_column=args.key_column, time_column=args.time_column,
        time_unit=args.time_unit, seed=args.seed, days=args.days, users=args.users, movies=args.movies,
        seconds_per_window=args.seconds_per_window, speedup=args.speedup, fast=args.fast, windows=args.windows,
        duration=args.duration, metrics_port=args.metrics_port, workdir=args.workdir,
        dashboard=args.dashboard, dashboard_port=args.dashboard_port,
        color=args.color == "always" or (args.color == "auto" and sys.stdout.isatty()))
    import logging

    # the demo's own lines go to stdout; library logging only for problems (the workers log to files)
    logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("kafka").setLevel(logging.ERROR)
    demo = Demo(options)
    uninstall = install_sigint(demo)
    try:
        return demo.run()
    except (ConfigError, ReplayError, DevStackError, RuntimeError) as exc:
        print(f"demo error: {exc}", file=sys.stderr)
        return 1
    finally:
        uninstall()

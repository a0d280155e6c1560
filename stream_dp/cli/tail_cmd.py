"""``stream-dp tail``: follow the releases topic and print each release as a readable table."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from stream_dp.broker_reach import BrokerUnreachable
from stream_dp.client import ReleaseRecordError, ReleaseSubscriber, UnsupportedSchemaVersion, release_types
from stream_dp.runtime import ExitCode, load_config_or_report
from stream_dp.tail import format_release

#: How long tail waits for a first broker to answer before it says none does (exit code 2).
BOOTSTRAP_TIMEOUT_MS = 10_000
EXAMPLES = """\
examples:
  stream-dp tail                                   # every release on the topic, then new ones, until Ctrl-C
  stream-dp tail --type histogram --new-only       # only new histogram releases
  stream-dp tail --count 9 --idle-timeout 120      # stop after 9 releases, or 2 minutes without one
  stream-dp tail --json | jq -c '.items[:3]'       # the raw records (schema: config/release.schema.json)
"""
RESERVED_TYPES = ("status",)  # in schema 1's type enum, published by no release of this version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tail", help="follow the releases topic and print releases as tables",
        description="Read the releases topic (no consumer group, nothing committed) and print every release "
        "record: window, type, status, mechanism, items, cost and the budget of its period. A release "
        "published twice (a worker restarted between publishing and marking it) is printed once. Records "
        "are checked against the release schema (stream_dp.client): a malformed one is reported on stderr "
        "and skipped, one of an unknown schema_version stops tail with an error. Each record shows its cost "
        "(ε of this release on its own) and its budget period after it (ε spent, composed; left; cap). No broker "
        "answering at the start: one line naming kafka.bootstrap_servers, exit code 2; a broker lost later: a "
        "line, and tail keeps reconnecting.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="TOML config (default: config/stream-dp.toml)")
    p.add_argument("--topic", help="releases topic (default: kafka.releases_topic)")
    p.add_argument("--type", action="append", choices=release_types(), dest="types", metavar="TYPE",
                   help="only this release type (repeatable): "
                   + ", ".join(t for t in release_types() if t not in RESERVED_TYPES)
                   + "; 'status' is also accepted: schema 1 reserves it, and no release of this version "
                   "publishes one")
    p.add_argument("--new-only", action="store_true", help="skip releases already on the topic")
    p.add_argument("--count", type=int, help="exit after printing this many releases")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                   help="exit when no release arrived for this long")
    p.add_argument("--json", action="store_true", help="print the raw JSON records, one per line")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.set_defaults(func=run)


def follow(follower: ReleaseSubscriber, out: TextIO, *, types: list[str] | None, count: int | None,
           idle_timeout: float | None, as_json: bool, color: bool,
           should_stop: Callable[[], bool] = lambda: False, notices: TextIO | None = None,
           delta_prime: float | None = None) -> int:
    """Print releases until ``count`` were printed, ``idle_timeout`` passed without one, or a stop. A line on
    ``notices`` (stderr) when no broker answers any more (an empty poll is otherwise silent) and when one does
    again."""
    printed = 0
    last = time.monotonic()
    cut_off = False
    while not should_stop():
        records = follower.poll()
        outage = None if records else follower.unreachable()
        if (outage is not None) != cut_off:
            cut_off = outage is not None
            print(f"tail: {outage}; retrying" if cut_off else "tail: reading the topic again",
                  file=notices or sys.stderr, flush=True)
        for record in records:
            if types and record.get("type") not in types:
                continue
            print(json.dumps(record) if as_json else format_release(record, color=color, delta_prime=delta_prime) + "\n",
                  file=out, flush=True)
            printed += 1
            last = time.monotonic()
            if count is not None and printed >= count:
                return printed
        if idle_timeout is not None and time.monotonic() - last > idle_timeout:
            break
    return printed


def run(args: argparse.Namespace) -> int:
    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    if not cfg.kafka.bootstrap_servers:
        print("config error: kafka.bootstrap_servers is empty; set it or STREAM_DP_KAFKA__BOOTSTRAP_SERVERS",
              file=sys.stderr)
        return 1
    # kafka-python logs every failed reconnect; tail says what they amount to itself (follow's notices)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        follower = ReleaseSubscriber(cfg.kafka, args.topic or cfg.kafka.releases_topic,
                                     start="now" if args.new_only else "beginning", on_invalid=_report,
                                     consumer_options={"bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS})
    except BrokerUnreachable as exc:  # at start: one line; a broker lost later is retried (follow's notices)
        signal.signal(signal.SIGINT, previous)
        print(f"tail: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    try:
        follow(follower, sys.stdout, types=args.types, count=args.count, idle_timeout=args.idle_timeout,
               as_json=args.json, color=color, should_stop=stop.is_set, delta_prime=cfg.budget.delta_prime)
    except UnsupportedSchemaVersion as exc:
        print(f"tail error: {exc}", file=sys.stderr)
        return 1
    finally:
        follower.close()
        signal.signal(signal.SIGINT, previous)
    return 0


def _report(error: ReleaseRecordError) -> None:
    """Skip a malformed message with a line on stderr; an unknown schema version stops tail."""
    if isinstance(error, UnsupportedSchemaVersion):
        raise error
    print(f"tail: skipped a message: {error}", file=sys.stderr, flush=True)

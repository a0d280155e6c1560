"""``stream-dp devstack up|down|status``: a local broker + redis-server that outlives the command."""

from __future__ import annotations

import argparse
import json
import sys

from stream_dp.dev import detached, devstack
from stream_dp.dev.kafka_broker import KAFKA_VERSION, LIBS_VARIABLE

EXAMPLES = """\
examples:
  stream-dp devstack up        # prints the broker and Redis addresses; commands with none configured use them
  stream-dp devstack status    # exit 1 when nothing runs
  stream-dp devstack down
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "devstack",
        help="start, stop or inspect a local Kafka-protocol broker and redis-server",
        description="A detached local broker (Tansu, or Apache Kafka with --broker kafka) and redis-server on "
        "free ports, for poking at stream-dp. Its ports and pids are kept in a state file of this checkout "
        "(--state, or $STREAM_DP_DEVSTACK_STATE, chooses another), so two checkouts never share one stack; "
        "commands with no broker or Redis configured use the stack of the state file they would find. `up` "
        "returns once the broker listens and Redis answers PING (its data loaded).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--broker", choices=devstack.BROKERS, default="tansu",
                   help="up: the embedded Tansu (default, Python only) or Apache Kafka %s in KRaft mode (needs "
                   "Java 17+; fetched once with Maven into ~/.cache/stream-dp, or $%s)"
                   % (KAFKA_VERSION, LIBS_VARIABLE))
    p.add_argument("--state", metavar="PATH", help="the state file (default: one per checkout; "
                   "$STREAM_DP_DEVSTACK_STATE overrides it for every command)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state = detached.state_path(args.state)
    if args.action == "up":
        try:
            info = detached.up(args.broker, state)
        except devstack.DevStackError as exc:
            print(f"devstack error: {exc}", file=sys.stderr)
            return 1
    elif args.action == "down":
        info = detached.down(state)
    else:
        info = detached.status(state)
    shown = {k: v for k, v in info.items() if k != "components"}  # argv/ports for restarts: state file only
    shown["state"] = str(state)
    print(json.dumps(shown, indent=2))
    return 0 if args.action != "status" or info.get("running") else 1

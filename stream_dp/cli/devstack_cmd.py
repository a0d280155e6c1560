"""``stream-dp devstack up|down|status``: a local broker + redis-server that outlives the command."""

from __future__ import annotations

import argparse
import json
import sys

from stream_dp import devstack

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
        description="A detached local broker (Tansu) and redis-server on free ports, for poking at stream-dp. "
        "Its ports and pids are kept in a state file ($STREAM_DP_DEVSTACK_STATE).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("up", "down", "status"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "up":
        try:
            info = devstack.up()
        except devstack.DevStackError as exc:
            print(f"devstack error: {exc}", file=sys.stderr)
            return 1
    elif args.action == "down":
        info = devstack.down()
    else:
        info = devstack.status()
    shown = {k: v for k, v in info.items() if k != "components"}  # argv/ports for restarts: state file only
    print(json.dumps(shown, indent=2))
    return 0 if args.action != "status" or info.get("running") else 1

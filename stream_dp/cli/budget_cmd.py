"""``stream-dp budget``: inspect the privacy-budget ledger -- scopes, spent and remaining (ε, δ), history, verify
-- and ``budget plan``: from the config alone, the worst-case cost of a window and how many fit a period.

Read-only: it never charges, reserves or cancels anything (``plan`` does not even connect to Redis).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

import redis

from stream_dp.accounting.budget import LIFETIME_SCOPE, BudgetCap
from stream_dp.accounting.ledger import ChargeResult, Ledger
from stream_dp.accounting.period_caps import CapNotices
from stream_dp.budget_text import delta_text, epsilon_text
from stream_dp.tables import print_table, table
from stream_dp.runtime import ExitCode, load_config_or_report
from stream_dp.config import Config
from stream_dp.keys import Keys

EXAMPLES = """\
examples:
  stream-dp budget plan                            # from the config alone: does a day of windows fit the cap?
  stream-dp budget plan --expected-users 5000      # ... and which release type to run for that audience
  stream-dp budget list                            # every period: ε spent / left / cap, δ spent / left
  stream-dp budget show 2026-11-29                 # one period (scope)
  stream-dp budget history 2026-11-29 --count 20   # its charges: cost ε, ρ, Σε, δ per release
  stream-dp budget verify                          # stored totals = totals recomputed from the log (exit 1 if not)
  stream-dp budget verify --against-topic          # ... and the ledger against the releases topic, both ways
  stream-dp budget rebuild --from-topic            # after Redis lost the ledger: restore it from the topic
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "budget", help="inspect the privacy-budget ledger (scopes, spent/remaining ε and δ, history, verify)",
        description="Show the ledger's budget scopes with spent and remaining (ε, δ) per user and their stored "
        "caps, the event log of a scope, or verify that stored totals equal the totals recomputed from the log "
        "and fit the stored cap (exit code 1 if not); --against-topic also checks the ledger against the "
        "releases topic both ways. rebuild --from-topic restores the ledger from the releases topic after Redis "
        "lost it. ε as tail and the dashboard show it: spent is the period's composed ε, a charge's cost its ε "
        "on its own.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("list", "show", "history", "verify", "plan", "rebuild"),
                   help="list: every scope; show/history/verify: one scope (verify without a scope: all); "
                   "plan: worst-case cost per window and windows per period/lifetime, from the config alone; "
                   "rebuild --from-topic: restore the ledger from the published records")
    p.add_argument("scope", nargs="?", help="a scope such as 2026-11-29, p1795950000 or lifetime")
    p.add_argument("--config", help="TOML config (default: config/stream-dp.toml)")
    p.add_argument("--count", type=int, help="history: at most this many entries (oldest first)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--against-topic", action="store_true",
                   help="verify: also read the releases topic and check it against the ledger both ways")
    p.add_argument("--from-topic", action="store_true",
                   help="rebuild: restore each scope's charges (and the released windows) from the releases topic")
    p.add_argument("--force", action="store_true",
                   help="rebuild even when the ledger lost nothing (rewrites each scope on the topic; stop the "
                   "release workers first)")
    p.add_argument("--expected-users", type=float, metavar="N",
                   help="plan: also recommend a release type for about N users per window (docs/evaluation)")
    p.set_defaults(func=run, trailing_positional="scope")  # SCOPE may also follow the options


def _ledger(cfg: Config) -> Ledger:
    from stream_dp import connections

    return Ledger(connections.redis_client(cfg.redis), BudgetCap.from_config(cfg.budget),
                  keys=Keys(cfg.redis.key_prefix), lifetime_cap=BudgetCap.lifetime_from_config(cfg.budget),
                  cap_notices=CapNotices(quiet=True))


def _state_dict(state: ChargeResult, cap: BudgetCap, open_reservations: int, stored: bool) -> dict[str, Any]:
    """A scope's row: its budget block under its stored cap (``cap_stored``; a scope not charged yet shows
    the configured cap, which its first charge will store), δ′ of that cap, ρ, basic ε and open holds."""
    block = state.budget_block(state.scope, cap)
    return {**block, "delta_prime": (state.cap or cap).delta_prime, "cap_stored": stored, "rho": state.spent.rho,
            "basic_epsilon": state.spent.basic_epsilon if math.isfinite(state.spent.basic_epsilon) else None,
            "open_reservations": open_reservations}


def _cap(ledger: Ledger, scope: str) -> BudgetCap:
    return ledger.lifetime_cap if scope == LIFETIME_SCOPE and ledger.lifetime_cap else ledger.cap


def _print_states(rows: list[dict[str, Any]], out: TextIO) -> None:
    """Spent / left / cap per scope (the scope's stored cap, ``(config)`` before its first charge), in the
    precision tail, the demo and the dashboard use (budget_text)."""
    columns = ("scope", "ε spent", "ε left", "ε cap", "δ spent", "δ left", "δ cap", "holds")
    print_table(table(columns, [(r["scope"], epsilon_text(r["epsilon_spent"]), epsilon_text(r["epsilon_remaining"]),
                                 epsilon_text(r["epsilon_cap"]) + ("" if r["cap_stored"] else " (config)"),
                                 delta_text(r["delta_spent"]), delta_text(r["delta_remaining"]),
                                 delta_text(r["delta_cap"]), r["open_reservations"]) for r in rows],
                      numeric=columns[1:]), out)
    if any(not r["cap_stored"] for r in rows):
        print("(config): not charged yet -- the configured cap, stored with the scope's first charge", file=out)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    if args.action == "plan":
        return _plan(cfg, args, out)
    if args.action in ("show", "history") and not args.scope:
        print(f"budget {args.action} needs a scope (see: stream-dp budget list)", file=sys.stderr)
        return 2
    if args.action == "rebuild" and not args.from_topic:
        print("budget rebuild needs --from-topic (the releases topic is what it rebuilds from)", file=sys.stderr)
        return 2
    try:
        ledger = _ledger(cfg)
        if args.action == "rebuild":
            from stream_dp.cli.budget_topic import rebuild_from_topic

            return 0 if rebuild_from_topic(cfg, ledger, out, force=args.force) else 1
        return _act(args, ledger, out, cfg)
    except (ValueError, redis.RedisError) as exc:
        print(f"cannot read the ledger: {exc}", file=sys.stderr)
        return 1


def _plan(cfg: Config, args: argparse.Namespace, out: TextIO) -> int:
    """Print the budget plan; exit code 1 when a period is not covered (and not explicitly allowed)."""
    from stream_dp.release.budget_plan import plan_for, render

    summary = plan_for(cfg).summary(expected_users=args.expected_users)
    print(json.dumps(summary, indent=2) if args.json else render(summary), file=out)
    return 0 if summary["period_covered"] or summary["allow_partial_period"] else 1


def _act(args: argparse.Namespace, ledger: Ledger, out: TextIO, cfg: Config) -> int:
    if args.action in ("list", "show"):
        scopes = ledger.scopes() if args.action == "list" else [args.scope]
        rows = []
        for scope in scopes:
            rows.append(_state_dict(ledger.remaining(scope), _cap(ledger, scope), ledger.open_reservations(scope),
                                    ledger.stored_cap(scope) is not None))
        if args.json:
            print(json.dumps(rows, indent=2), file=out)
        else:
            _print_states(rows, out)
        return 0
    if args.action == "history":
        entries = ledger.history(args.scope, count=args.count)
        if args.json:
            print(json.dumps([e.to_dict() for e in entries], indent=2), file=out)
            return 0
        lines: list[tuple[str, ...]] = []
        for e in entries:
            spent = e.cost.spent()
            when = datetime.fromtimestamp(e.time, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            # mechanism: a field of every event type, which the base class DpEvent does not declare
            mechanisms = ",".join(sorted({getattr(ev, "mechanism", "") or ev.kind for ev in e.events}))
            # cost: this entry's ε on its own, as tail and the dashboard show a release's cost (budget_text)
            lines.append((when, e.type, e.id, epsilon_text(spent.epsilon(ledger.cap.delta_prime)), f"{spent.rho:.5f}",
                          epsilon_text(spent.basic_epsilon), delta_text(max(spent.zcdp_delta, spent.basic_delta)),
                          mechanisms))
        print_table(table(("time (UTC)", "type", "id", "cost ε", "ρ", "Σε", "δ", "mechanisms"), lines,
                          numeric=("cost ε", "ρ", "Σε", "δ")), out)
        return 0
    scopes = [args.scope] if args.scope else ledger.scopes()
    reports = [ledger.verify(scope) for scope in scopes]
    topic = None
    if args.against_topic:
        from stream_dp.cli.budget_topic import audit_topic

        topic = audit_topic(cfg, ledger)
    if args.json:
        rows = [{"scope": r.scope, "ok": r.ok, "problems": list(r.problems), "charges": r.charges,
                 "open_reservations": r.open_reservations,
                 "cap": r.cap.to_dict() if r.cap is not None else None} for r in reports]
        print(json.dumps(rows if topic is None else {"scopes": rows, "topic": topic.to_dict()}, indent=2),
              file=out)
    else:
        for r in reports:
            status = "OK" if r.ok else "MISMATCH"
            cap = f"stored cap ε {r.cap.epsilon:g}, δ {r.cap.delta:g}" if r.cap is not None else "no stored cap"
            print(f"{r.scope}: {status} ({r.charges} charges, {r.open_reservations} open reservations, {cap})",
                  file=out)
            for problem in r.problems:
                print(f"  - {problem}", file=out)
        if topic is not None:
            print(topic.summary(), file=out)
            for problem in topic.problems:
                print(f"  - {problem}", file=out)
    return 0 if (topic is None or topic.ok) and all(r.ok for r in reports) else 1

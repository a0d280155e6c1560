"""A separate OS process that uses the ledger, for the concurrency and crash tests (not a test module).

    python tests/integration/ledger_worker.py race URL PREFIX WORKER N        charge N distinct release ids
    python tests/integration/ledger_worker.py same-id URL PREFIX WORKER N     charge ids same-0..N-1 (shared)
    python tests/integration/ledger_worker.py reserve-and-wait URL PREFIX     reserve, say so, wait forever

All wait for a start token on the list ``<PREFIX>:go`` so they race for real. Results go to stdout as JSON.
"""

from __future__ import annotations

import json
import sys
import threading

import redis

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.events import PureDpEvent, RangeBoundedEvent
from stream_dp.accounting.ledger import Ledger
from stream_dp.store.keys import Keys

CAP = BudgetCap(2.0, 1e-5, 1e-7)
RACE_EVENTS = [RangeBoundedEvent(0.05, count=1, delta=1e-8, mechanism="limited_domain_topk")]
SAME_ID_EVENTS = [PureDpEvent(0.01, mechanism="noisy_topk_with_gap")]
RESERVE_EVENTS = [RangeBoundedEvent(0.1, count=10, delta=1e-7, mechanism="limited_domain_topk")]
START_TIMEOUT_SECONDS = 60


def main(argv: list[str]) -> int:
    mode, url, prefix = argv[0], argv[1], argv[2]
    client = redis.Redis.from_url(url)
    ledger = Ledger(client, CAP, keys=Keys(prefix))
    if mode == "reserve-and-wait":
        result = ledger.reserve("day", "w1.topk", RESERVE_EVENTS)
        print(json.dumps({"reserved": result.accepted}), flush=True)
        threading.Event().wait()  # until killed; a settle never comes
        return 0  # pragma: no cover
    worker, n = argv[3], int(argv[4])
    if client.blpop([f"{prefix}:go"], timeout=START_TIMEOUT_SECONDS) is None:
        print(json.dumps({"error": "no start token"}), flush=True)
        return 1
    out = []
    for i in range(n):
        if mode == "race":
            r = ledger.charge("day", f"{worker}-{i}", RACE_EVENTS, payload=f"{worker}-{i}")
        else:
            r = ledger.charge("day", f"same-{i}", SAME_ID_EVENTS, payload=f"from-{worker}")
        out.append([r.accepted, r.duplicate, r.reason, r.payload])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Schema-valid release records for subscriber tests (the shapes the release worker publishes)."""

from __future__ import annotations

import json
from typing import Any



from topic_helpers import CheckedProducer, contract_topics

DAY = 86400
T0 = 1_793_577_600  # 2026-11-02 00:00 UTC


def record(window: int, rtype: str = "topk", *, keys: tuple[str, ...] = ("a", "b"), status: str = "released",
           hit_bottom: bool | None = None, spent: float = 0.5, size: int = DAY, **extra: Any) -> dict[str, Any]:
    """A valid schema-1 record for window number ``window`` (0, 1, …) of ``size`` seconds."""
    start = T0 + window * size
    items: list[dict[str, Any]] = []
    if status == "released":
        if rtype == "alerts":
            items = [{"key": k, "above": True, "estimate": 150.0 - 10 * i, "lower_bound": 120.0 - 10 * i,
                      "gap": 50.0 - 10 * i, "branch": "top"} for i, k in enumerate(keys)]
        elif rtype == "sample":
            items = [{"key": k, "token": 3.0, "estimate": 40.0 - i} for i, k in enumerate(keys)]
        else:
            items = [{"key": k, "rank": i + 1} for i, k in enumerate(keys)]
    rec = {
        "release_id": f"{start}-{start + size}.{rtype}", "schema_version": 1,
        "window": {"start": start, "end": start + size}, "type": rtype, "status": status,
        "mechanism": {"name": "m", "parameters": {"k": 10}}, "items": items,
        "hit_bottom": (hit_bottom if hit_bottom is not None else True) if rtype == "topk" and status == "released"
        else hit_bottom,
        "cost": {"events": [] if status != "released" else [{"kind": "pure_dp", "epsilon": 0.5}],
                 "epsilon": 0.5 if status == "released" else 0.0, "delta": 0.0},
        "budget": {"scope": "2026-11-02", "epsilon_spent": spent, "delta_spent": 0.0,
                   "epsilon_remaining": 10.0 - spent, "delta_remaining": 1e-5, "epsilon_cap": 10.0,
                   "delta_cap": 1e-5},
        "created_at": "2026-11-03T00:00:01.000Z",
    }
    rec.update(extra)
    return rec


def releases_topic(bootstrap: str, topic: str) -> str:
    """Create ``topic`` with one partition (the worker's releases topic has one), if it does not exist."""
    contract_topics(bootstrap, releases=topic)
    return topic


def produce(bootstrap: str, topic: str, values: list[dict[str, Any] | bytes]) -> None:
    """Publish records (dicts, keyed by release id) or raw message values, in order, and wait for acks,
    to a one-partition topic (created if needed), so the order read is the order published."""
    releases_topic(bootstrap, topic)
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for value in values:
            if isinstance(value, dict):
                producer.send(topic, key=str(value.get("release_id", "")).encode(),
                              value=json.dumps(value).encode())
            else:
                producer.send(topic, key=b"raw", value=value)
        producer.flush()
    finally:
        producer.close()

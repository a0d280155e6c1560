"""The argmax release's read: the sorted prefix its search needs (issue 47, ``stream_dp/release/argmax_prefix.py``)
vs the whole window read as before, on one redis-server, same windows, same seeds, same run.

Each window (``--keys`` keys, Zipf-like counts) is written in each layout of ``--layouts``; per window kind
-- ``winner`` (one key far ahead: the search stops at level 1) and ``flat`` (no clear winner: the search
goes through every count) -- each seed times (a) the whole-window release as main had it: ``all_counts`` then
the mechanism over the whole mapping, and (b) the production builder's read and run (the prefix). Both give
the same key for the same seed (asserted). Reported per layout and kind: p50 of each, the ratio prefix /
whole, and the bytes Redis sent for one release of each (``INFO stats``).

    python -m bench.bench_argmax                          # 10^5 keys, user:1 and key:12, 5 seeds
    python -m bench.bench_argmax --keys 1000000 --seeds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

from stream_dp.config import config_from_mapping
from stream_dp.dev.components import redis_service
from stream_dp.mechanisms import large_margin_argmax
from stream_dp.release.argmax_builder import ArgmaxBuilder
from stream_dp.release.windows import Window, WindowReader
from stream_dp.rng import make_rng
from stream_dp.store.keys import Keys, key_shard_of

from bench.results import emit

WINDOW = Window(3600, 3660)


def _counts(kind: str, keys: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    if kind == "flat":
        return {f"k{i:08d}": int(c) for i, c in enumerate(rng.integers(1, 4, keys))}
    counts = {f"k{i:08d}": int(c) for i, c in enumerate(np.minimum(rng.zipf(1.6, keys), 200))}
    counts["winner"] = 5000
    return counts


def _write(client: redis.Redis, counts: dict[str, int], layout: str, shards: int, prefix: str) -> Keys:
    keys = Keys(prefix, shards, layout)
    parts: dict[str, dict[str, int]] = {}
    for key, count in counts.items():
        name = (keys.key_shard_counts(WINDOW.start, key_shard_of(key, shards)) if layout == "key"
                else keys.window_counts(WINDOW.start, 0))
        parts.setdefault(name, {})[key] = count
    for name, members in parts.items():
        items = list(members.items())
        for s in range(0, len(items), 20_000):
            client.zadd(name, dict(items[s:s + 20_000]))
    return keys


def _sent(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=100_000, help="keys per window (default 10^5)")
    ap.add_argument("--seeds", type=int, default=5, help="releases per layout and window kind (default 5)")
    ap.add_argument("--layouts", default="user:1,key:12", help="layout:shards list (user layout: S = 1 only)")
    args = ap.parse_args(argv)
    layouts = [(a, int(s)) for a, s in (item.split(":") for item in args.layouts.split(","))]
    if any(a == "user" and s != 1 for a, s in layouts):
        ap.error("--layouts: the user layout is benchmarked unsharded only (user:1)")
    cfg = config_from_mapping({"releases": {"argmax": {"enabled": True, "window_epsilon": 1.0, "window_delta": 1e-6}}}, environ={})
    builder = ArgmaxBuilder(cfg)
    a = cfg.releases.argmax
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-argmax-") as tmp:
        server = redis_service(Path(tmp), persistence=False, detached=False, own_process_group=False)
        server.start()
        try:
            client = redis.Redis(port=server.port)
            for layout, shards in layouts:
                for kind in ("winner", "flat"):
                    counts = _counts(kind, args.keys, 1)
                    keys = _write(client, counts, layout, shards, f"{kind}-{layout}{shards}")
                    times: dict[str, list[float]] = {"whole": [], "prefix": []}
                    sent: dict[str, int] = {}
                    for seed in range(-1, args.seeds):  # seed -1: warm-up (scripts, connections)
                        reader = WindowReader(client, keys=keys, size_seconds=60)
                        before, t0 = _sent(client), time.perf_counter()
                        data = reader.all_counts(WINDOW).as_dict()
                        whole = large_margin_argmax(data, epsilon=a.window_epsilon, delta=a.window_delta, n=1,
                                                    universe_size=max(len(data), builder.universe_size()),
                                                    rng=make_rng(max(seed, 0)))
                        t1 = time.perf_counter()
                        sent["whole"] = _sent(client) - before
                        del data
                        reader = WindowReader(client, keys=keys, size_seconds=60)
                        before, t2 = _sent(client), time.perf_counter()
                        draft = builder.run(WINDOW, builder.read(reader, WINDOW, []).now(), make_rng(max(seed, 0)))
                        t3 = time.perf_counter()
                        sent["prefix"] = _sent(client) - before
                        got = draft.items[0]["key"] if draft.items else None
                        assert got == (None if draft.info["no_clear_winner"] else whole), (layout, kind, seed)
                        if seed >= 0:
                            times["whole"].append(t1 - t0)
                            times["prefix"].append(t3 - t2)
                    whole_s, prefix_s = statistics.median(times["whole"]), statistics.median(times["prefix"])
                    rows.append({"layout": f"{layout}:{shards}", "kind": kind, "whole_p50_s": whole_s,
                                 "prefix_p50_s": prefix_s, "ratio": prefix_s / whole_s,
                                 "whole_bytes": sent["whole"], "prefix_bytes": sent["prefix"]})
            client.close()
        finally:
            server.stop()
    print(f"argmax release, {args.keys} keys per window, {args.seeds} seeds, one redis-server")
    print(f"{'layout':>8} {'window':>7} {'whole p50':>10} {'prefix p50':>11} {'ratio':>7} {'whole B':>10} {'prefix B':>9}")
    for r in rows:
        print(f"{r['layout']:>8} {r['kind']:>7} {r['whole_p50_s']:>9.4f}s {r['prefix_p50_s']:>10.4f}s "
              f"{r['ratio']:>7.3f} {r['whole_bytes']:>10} {r['prefix_bytes']:>9}")
    result = {"bench": "argmax", "keys": args.keys, "seeds": args.seeds, "rows": rows}
    emit(result)
    return result


if __name__ == "__main__":
    main()

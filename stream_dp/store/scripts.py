"""Every Lua script of the service and the one loader: a script is a file ``stream_dp/store/lua/<name>.lua``.

:data:`SCRIPTS` lists every script by name with the preludes its text starts with; :func:`register` gives a
client's redis-py ``Script`` for one (``EVALSHA``, loading the script when Redis answers ``NOSCRIPT``). The
service's batches run scripts by SHA through :mod:`stream_dp.node_batches` (``evalsha_item``: one pipeline per
master on a cluster; ``run_with_scripts``: ``NOSCRIPT`` loads the batch's scripts and sends it again;
``load_scripts``: ``SCRIPT LOAD`` on every master when a worker starts).

Preludes, prepended in the order listed (each script's KEYS and ARGV are documented at the top of its file):

- ``window_state`` -- the window states as Lua constants (:func:`stream_dp.store.window_state.lua_constants`);
- ``release_shard`` -- the function that marks one window shard released (``lua/release_shard.lua``);
- ``ledger_common`` -- the ledger scripts' KEYS, argument decoding and cap rule (``lua/ledger_common.lua``).

Who runs what: ingest's store (:mod:`stream_dp.ingest.store`) ``apply_window`` (and, in the key layout,
``count_keys``: :mod:`stream_dp.store.key_counts`), its watermarks
(:mod:`stream_dp.ingest.watermarks`) ``register_windows``, ``advance_watermark``, ``close_window``,
``finalize_watermark``; the release worker's window reader
(:mod:`stream_dp.release.windows`) the ``window_*`` reads, ``mark_released``, ``mark_released_fence``,
``release_one_shard``, ``advance_released_cursor``, and in the key layout its drain
(:mod:`stream_dp.release.key_drain`) ``count_keys`` and ``release_key_shard``; its claims (:mod:`stream_dp.release.claim`) ``claim_*``;
the alerts' state (:mod:`stream_dp.release.alerts`) ``alerts_*``; the ledger (:mod:`stream_dp.accounting.ledger`)
``ledger_*`` and ``stream-dp budget rebuild`` ``ledger_restore``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from stream_dp.store.window_state import lua_constants
from stream_dp.errors import StreamDPError

#: script name → the preludes its text starts with, in order.
SCRIPTS: dict[str, tuple[str, ...]] = {
    # ingest: one window shard ({w:<start>[:<shard>]}) and ingest's progress ({ingest})
    "apply_window": ("window_state",),
    "register_windows": (),
    "advance_watermark": (),
    "close_window": ("window_state",),
    "finalize_watermark": (),
    # the key layout's step 2, one key shard ({w:<start>:k<j>}): ingest's step 2 and the release's drain
    # (docs/design/key-sharded-counts.md)
    "count_keys": ("window_state",),
    # the release worker: reads of a closed window, its released mark, the released-through cursor
    "window_read_chunk": (),
    "window_top": (),
    "window_scores": (),
    "window_count_histogram": (),
    "window_members_at": (),
    "mark_released": ("window_state", "release_shard"),
    "mark_released_fence": (),
    "release_one_shard": ("window_state", "release_shard"),
    "release_key_shard": ("window_state",),
    "advance_released_cursor": (),
    # the release worker's claim on a window ({w:<start>}:claim)
    "claim_renew": (),
    "claim_drop": (),
    # the alerts' sparse-vector state ({svt:alerts})
    "alerts_cas_state": (),
    "alerts_apply_staged": (),
    # the budget ledger, one scope ({ledger:<scope>})
    "ledger_charge": ("ledger_common",),
    "ledger_reserve": ("ledger_common",),
    "ledger_settle": ("ledger_common",),
    "ledger_cancel": ("ledger_common",),
    "ledger_restore": ("ledger_common",),
}

#: Preludes that are files under ``lua/`` (the window states are made from :mod:`stream_dp.store.window_state`).
PRELUDE_FILES: tuple[str, ...] = ("release_shard", "ledger_common")


class UnknownScript(KeyError, StreamDPError):
    """A script name that is not in :data:`SCRIPTS`."""


def lua_file(name: str) -> str:
    """The text of ``stream_dp/store/lua/<name>.lua`` (a script or a prelude file), as shipped in the package."""
    return resources.files("stream_dp.store").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def _prelude(name: str) -> str:
    return lua_constants() if name == "window_state" else lua_file(name)


@cache
def script_text(name: str) -> str:
    """The full text of script ``name``: its preludes, then its file (each part on its own lines)."""
    if name not in SCRIPTS:
        raise UnknownScript(f"no Lua script {name!r} in stream_dp/store/lua (known: {', '.join(sorted(SCRIPTS))})")
    return "\n".join([*(_prelude(p) for p in SCRIPTS[name]), lua_file(name)])


def register(client: Any, name: str) -> Any:
    """Script ``name`` registered with ``client`` (a redis-py ``Script``; a cluster client's works too): calling
    it runs ``EVALSHA`` and, on ``NOSCRIPT``, loads the script and runs it again; its ``sha`` is what
    :func:`stream_dp.node_batches.evalsha_item` sends in a batch."""
    return client.register_script(script_text(name))

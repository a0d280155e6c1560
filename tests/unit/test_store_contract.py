"""The Redis contract has one home (stream_dp/store/): no Lua in a Python file of the service, every script a file
under stream_dp/store/lua/ that the one loader knows, every script the code registers is one of them, and the
window states are spelled once.

Who registers which script is read from the code itself: each component that runs scripts is built on a client
that records what it is asked to register (no server needed), and the loader's names in the source are read
with ``ast`` (a name built at run time, as the ledger's, is seen by the recording)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.ledger import Ledger
from stream_dp.ingest.store import WindowStore
from stream_dp.release.alerts import AlertsStore
from stream_dp.release.claim import WindowClaims
from stream_dp.release.windows import WindowReader
from stream_dp.store import scripts, window_state
from stream_dp.store.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stream_dp"
LUA = PACKAGE / "store" / "lua"
INLINE_LUA = re.compile(r"redis\.p?call\(")


def inline_lua(root: Path) -> list[str]:
    """``path:line`` of every Lua call (``redis.call(`` / ``redis.pcall(``) in a .py file under ``root``."""
    return [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if INLINE_LUA.search(line)]


def test_no_python_file_of_the_service_holds_lua():
    assert inline_lua(PACKAGE) == []


def test_the_check_finds_an_inline_script(tmp_path):  # broken variant: a script written back into a module
    (tmp_path / "claim.py").write_text('_RENEW = """\nif redis.call(\'GET\', KEYS[1]) == ARGV[1] then\n"""\n')
    assert inline_lua(tmp_path) == ["claim.py:2"]


def test_every_lua_file_is_a_script_or_a_prelude_the_loader_knows():
    files = {path.stem for path in LUA.glob("*.lua")}
    assert files == set(scripts.SCRIPTS) | set(scripts.PRELUDE_FILES)
    assert not [p for p in PACKAGE.rglob("*.lua") if p.parent != LUA], "a .lua file outside stream_dp/store/lua"
    preludes = {p for names in scripts.SCRIPTS.values() for p in names}
    assert preludes <= set(scripts.PRELUDE_FILES) | {"window_state"}
    assert set(scripts.PRELUDE_FILES) <= preludes  # no prelude file left unused


def test_each_script_text_is_its_preludes_then_its_file():
    for name, preludes in scripts.SCRIPTS.items():
        text = scripts.script_text(name)
        assert text.endswith(scripts.lua_file(name)), name
        assert ("WINDOW_" in scripts.lua_file(name)) <= ("window_state" in preludes), name
        assert ("release_shard(" in scripts.lua_file(name)) <= ("release_shard" in preludes), name
    with pytest.raises(scripts.UnknownScript, match="no Lua script 'renew' in stream_dp/store/lua"):
        scripts.script_text("renew")


def test_the_window_states_are_spelled_once():
    """Lua names the states by the constants the window_state prelude defines from stream_dp.store.window_state,
    never by a literal (a literal 'released' in one script and a constant in another could drift apart)."""
    literals = re.compile("|".join(f"'{state}'|\"{state}\"" for state in window_state.STATES))
    for path in LUA.glob("*.lua"):
        code = "\n".join(line.split("--", 1)[0] for line in path.read_text(encoding="utf-8").splitlines())
        assert not literals.search(code), path.name
    prelude = window_state.lua_constants()
    assert [f"'{s}'" for s in window_state.STATES] == re.findall(r"'[a-z]+'", prelude)


class RecordingClient:
    """Stands in for a redis-py client where a component registers its scripts: records each text."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def register_script(self, text: str) -> object:
        self.texts.append(text)
        return object()


def registered_by_components() -> set[str]:
    """The scripts the service's components register when they are built, by name."""
    client = RecordingClient()
    keys = Keys("t")
    WindowStore(client, keys=keys, window_size=60)  # type: ignore[arg-type]
    WindowStore(client, keys=Keys("t", 2, "key"), window_size=60)  # type: ignore[arg-type]  # + step 2
    WindowReader(client, keys=keys, size_seconds=60)  # type: ignore[arg-type]
    WindowClaims(client, keys=keys, worker_id="w")  # type: ignore[arg-type]
    AlertsStore(client, keys=keys)  # type: ignore[arg-type]
    Ledger(client, BudgetCap(1.0, 1e-5, 1e-7), keys=keys)  # type: ignore[arg-type]
    by_text = {scripts.script_text(name): name for name in scripts.SCRIPTS}
    unknown = [text[:80] for text in client.texts if text not in by_text]
    assert not unknown, f"registered a script that is not the loader's: {unknown}"
    return {by_text[text] for text in client.texts}


def named_in_source() -> set[str]:
    """Script names passed as literals to the loader (``scripts.register(client, "<name>")``) anywhere in the
    service; and no module but the loader calls redis-py's ``register_script`` itself."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "register_script":
                assert path == PACKAGE / "store" / "scripts.py", f"{path.relative_to(ROOT)}: register_script " \
                                                                 "outside the loader"
            if (node.func.attr == "register" and isinstance(node.func.value, ast.Name) and node.func.value.id == "scripts"
                    and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)):
                names.add(node.args[1].value)
    return names


#: Scripts shipped ahead of the code that runs them, each with the design that wires it in. Once a component
#: registers one, the test below fails until it is taken off this list.
STAGED: dict[str, str] = {}


def test_every_script_the_code_uses_exists_and_every_script_is_used():
    named, registered = named_in_source(), registered_by_components()
    assert named <= set(scripts.SCRIPTS), named - set(scripts.SCRIPTS)
    assert not (registered | named) & set(STAGED), "a staged script is run now: take it off STAGED"
    assert registered | named | set(STAGED) == set(scripts.SCRIPTS)
    assert "ledger_restore" in named  # stream-dp budget rebuild (stream_dp/release/ledger_rebuild.py)


def test_the_key_layout_is_the_deployed_one():
    """Key names are data a running deployment already holds: a rename strands it. Every name, as written."""
    k, sharded = Keys("sdp"), Keys("sdp", shards=4)
    assert [k.window_counts(60), k.window_users(60), k.window_offsets(60), k.window_meta(60)] == [
        "sdp:{w:60}:counts", "sdp:{w:60}:users", "sdp:{w:60}:offsets", "sdp:{w:60}:meta"]
    assert [sharded.window_counts(60, 3), sharded.window_meta(60, 3), sharded.window_claim(60),
            sharded.window_released(60)] == ["sdp:{w:60:3}:counts", "sdp:{w:60:3}:meta", "sdp:{w:60}:claim",
                                             "sdp:{w:60}:released"]
    assert [k.windows_index(), k.ingest_epoch(), k.schedule(), k.watermarks(), k.window_closes(), k.topic_ids()] == [
        "sdp:{ingest}:windows", "sdp:{ingest}:epoch", "sdp:{ingest}:schedule", "sdp:{ingest}:watermarks",
        "sdp:{ingest}:closes", "sdp:{ingest}:topic-ids"]
    assert k.ledger_scope("2026-12") == [f"sdp:{{ledger:2026-12}}:{part}" for part in (
        "totals", "log", "charges", "outbox", "unpublished", "reservations", "res_results", "settled", "cap")]
    assert [k.ledger_scopes(), k.ledger_scopes_fence(), k.ledger_epoch()] == [
        "sdp:{ledger}:scopes", "sdp:{ledger}:replicated", "sdp:{ledger}:epoch"]
    assert [k.release_index("released"), k.svt("alerts", "state"), k.svt_fence("alerts")] == [
        "sdp:{release}:released", "sdp:{svt:alerts}:state", "sdp:{svt:alerts}:state:replicated"]
    by_key = Keys("sdp", shards=4, layout="key")  # windows.layout = "key": user shards' pending, key shards
    assert [by_key.window_pending(60, 3), *by_key.key_shard(60, 2)] == [
        "sdp:{w:60:3}:pending", "sdp:{w:60:k2}:counts", "sdp:{w:60:k2}:applied", "sdp:{w:60:k2}:meta"]

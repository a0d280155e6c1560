"""The dev stack's state file is one per checkout (issue 44): a second checkout's commands never attach to the
first one's broker and Redis; ``--state`` / ``$STREAM_DP_DEVSTACK_STATE`` choose another on purpose."""

from __future__ import annotations

from pathlib import Path

from stream_dp.dev import detached


def test_two_checkouts_get_two_state_files_and_an_override_wins(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("STREAM_DP_DEVSTACK_STATE", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    seen = {}
    for root in (Path("/src/a/stream-dp"), Path("/src/b/stream-dp")):
        monkeypatch.setattr(detached, "checkout", lambda root=root: root)
        seen[root] = detached.state_path()
    first, second = seen.values()
    assert first != second and first.parent == second.parent == tmp_path / "stream-dp"
    assert first.name.startswith("devstack-stream-dp-") and first.suffix == ".json"
    assert detached.state_path(tmp_path / "mine.json") == tmp_path / "mine.json"
    monkeypatch.setenv("STREAM_DP_DEVSTACK_STATE", str(tmp_path / "env.json"))
    assert detached.state_path() == tmp_path / "env.json"
    assert detached.state_path(tmp_path / "mine.json") == tmp_path / "mine.json"  # --state wins


def test_the_checkout_is_the_source_tree_root() -> None:
    """The state file is named after the checkout: the dev stack living in ``stream_dp/dev/`` must still name
    the tree that holds ``pyproject.toml``, so a stack started before the move is still found."""
    root = Path(__file__).resolve().parents[2]
    assert detached.checkout() == root and (root / "pyproject.toml").is_file()

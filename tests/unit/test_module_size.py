"""Small modules with one job: no module of ``stream_dp`` grows past 400 lines (issue 45). A module that outgrows
it is split along its concerns, not cut into a ``_helpers.py``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES = 400



def too_long(root: Path = ROOT, most: int = MOST_LINES) -> dict[str, int]:
    """``path -> lines`` of every module of ``stream_dp`` longer than ``most`` lines."""
    sizes = {p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in (root / "stream_dp").rglob("*.py")}
    return {path: n for path, n in sizes.items() if n > most}


def test_no_module_is_longer_than_400_lines():
    assert too_long() == {}


def test_the_check_catches_a_long_module(tmp_path):  # broken variant: a module of 401 lines
    (tmp_path / "stream_dp" / "ingest").mkdir(parents=True)
    (tmp_path / "stream_dp" / "ingest" / "store.py").write_text("x = 1\n" * 401, encoding="utf-8")
    (tmp_path / "stream_dp" / "short.py").write_text("x = 1\n" * 400, encoding="utf-8")
    assert too_long(tmp_path) == {"stream_dp/ingest/store.py": 401}

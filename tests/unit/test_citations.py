"""Every citation in the code base and its docs points at something a reader of the repository can open.

Scanned: stream_dp/, bench/, eval/, tests/, docs/ and README.md.

Docstrings and comments cite papers (author, year, section/algorithm/theorem) and the repository's own docs.
Two kinds of citation cannot be followed from a checkout and fail here:

- the design notes and algorithm specification the project was built from: they are not shipped, so a
  citation of them (by their file names, written below without the literal to keep this file clean) tells a
  reader nothing;
- a repository path (``stream_dp/…``, ``tests/…``, ``docs/….md``, …) that does not exist: a renamed or deleted
  file leaves its citations dangling.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED_DIRS = ("stream_dp", "bench", "eval", "tests", "docs")
SUFFIXES = {".py", ".md", ".lua", ".toml", ".sh", ".cfg", ".txt"}
TOP_LEVEL = ("stream_dp", "tests", "docs", "bench", "eval", "config", "workers", ".ci")

_DESIGN = "DES" + "IGN"
_SPEC = "ALGOR" + "ITHMS"
UNSHIPPED_DOC = re.compile(rf"\b(?:{_DESIGN}|{_SPEC})(?:\.md)?\b")
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(re.escape(d) for d in TOP_LEVEL) + r")/[\w.*/-]*[\w*])"
)


def scanned_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = [root / "README.md"]
    for top in SCANNED_DIRS:
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in rel:
                files.append(path)
    return files


def unshipped_citations(text: str) -> list[tuple[int, str]]:
    """(line, text) of every citation of the unshipped design notes or specification."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if UNSHIPPED_DOC.search(line)]


def missing_paths(text: str, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, path) of every cited repository path that matches no file or directory under ``root``."""
    missing = []
    for n, line in enumerate(text.splitlines(), 1):
        for match in REPO_PATH.finditer(line):
            cited = match.group(1).rstrip(".")
            found = any(root.glob(cited)) if "*" in cited else (root / cited).exists()
            if not found:
                missing.append((n, cited))
    return missing


def test_the_scan_covers_the_code_base() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    assert "stream_dp/mechanisms/limited_domain.py" in names
    assert "bench/README.md" in names
    assert "eval/report.py" in names
    assert "docs/privacy.md" in names and "README.md" in names
    assert len(names) > 100


def test_no_citation_of_unshipped_design_documents() -> None:
    me = Path(__file__).resolve()
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {line}"
        for p in scanned_files()
        if p.resolve() != me
        for n, line in unshipped_citations(p.read_text(encoding="utf-8"))
    ]
    assert not bad, "cite the paper or the repository's docs instead:\n" + "\n".join(bad)


def test_cited_repository_paths_exist() -> None:
    me = Path(__file__).resolve()  # its own examples and pending list name files that need not exist
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {cited}"
        for p in scanned_files()
        if p.resolve() != me
        for n, cited in missing_paths(p.read_text(encoding="utf-8"))
    ]
    assert not bad, "cited paths that are not in the repository:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "line",
    [
        "Privacy unit = user (" + _DESIGN + ".md §2).",
        "(" + _SPEC + " decision 5)",
        "see " + _SPEC + ".md §3.9",
        "the clock (" + _DESIGN + " §2b)",
    ],
)
def test_the_unshipped_check_flags_citations(line: str) -> None:
    assert unshipped_citations(f"ok\n{line}\n") == [(2, line)]


def test_the_unshipped_check_leaves_other_words_alone() -> None:
    assert unshipped_citations("design of the ledger; algorithms of DR19 §5; REDESIGNED; ALGORITHMIC") == []


def test_the_path_check_flags_a_missing_file_and_accepts_existing_ones(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "privacy.md").write_text("x")
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text("x")
    text = (
        "see docs/privacy.md §3 and tests/unit/test_*.py.\n"
        "moved: docs/gone.md, `stream_dp/old.py`\n"
        "a/docs/x.md is not a repository path\n"
    )
    assert missing_paths(text, root=tmp_path) == [(2, "docs/gone.md"), (2, "stream_dp/old.py")]

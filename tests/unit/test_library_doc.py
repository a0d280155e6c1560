"""docs/library.md's worked example runs as written (a doctest of the Markdown file, on in-tree data)."""

from __future__ import annotations

import doctest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_worked_example_of_docs_library_md_runs() -> None:
    result = doctest.testfile(str(ROOT / "docs" / "library.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 15
    assert result.failed == 0


def test_the_movielens_output_in_the_doc_is_the_scripts() -> None:
    """The real-data block is ``python -m eval.library_example``'s output: its plan line names the call the
    release-choice table gives for that cell today (it changes only when the evaluation is regenerated)."""
    from stream_dp import api

    text = (ROOT / "docs" / "library.md").read_text()
    choice = api.plan(epsilon=1.0, max_keys_per_user=5, k=10, expected_users=610, domain="complete")
    assert f"plan: {choice['release_type']} -> api.{choice['call']}(" in text

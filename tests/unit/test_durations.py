"""The longest-first order of the suite (tests/support/durations.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.durations import load, longest_first, nodeid, records_from_junit

ROOT = Path(__file__).resolve().parents[2]


def test_runs_of_a_block_stay_in_place_and_a_scope_moves_as_one_unit():
    # (name, block, scope): the kafka run stays between the two runs of unbrokered tests; m1/m2 share a scope
    items = [("u1", None, "u1"), ("m1", None, "m"), ("u2", None, "u2"), ("m2", None, "m"),
             ("k1", "kafka", "k1"), ("k2", "kafka", "k2"), ("u3", None, "u3")]
    seconds = {"u1": 1.0, "m1": 2.0, "m2": 2.0, "u2": 3.0, "k1": 1.0, "k2": 8.0, "u3": 50.0}
    out = longest_first(items, seconds=lambda i: seconds[i[0]], block=lambda i: i[1], scope=lambda i: i[2])
    assert [i[0] for i in out] == ["m1", "m2", "u2", "u1", "k2", "k1", "u3"]


def test_unknown_tests_keep_their_order_after_the_known_ones():
    out = longest_first(["a", "b", "c", "d"], seconds=lambda i: {"c": 4.0}.get(i, 0.0), block=lambda i: 0, scope=str)
    assert out == ["c", "a", "b", "d"]


def test_junit_cases_become_node_ids_and_short_or_unknown_ones_are_left_out(tmp_path):
    report = tmp_path / "run.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.unit.test_durations" name="test_x[a-1]" time="12.34"/>'
        '<testcase classname="tests.unit.test_durations.TestK" name="test_y" time="5"/>'
        '<testcase classname="tests.unit.test_durations" name="test_fast" time="0.2"/>'
        '<testcase classname="stream_dp.store.key_counts" name="stream_dp.store.key_counts.count_args" time="9"/>'
        '</testsuite></testsuites>')
    assert records_from_junit(report, ROOT) == {  # a doctest's node id is its module's file and its dotted name
        "stream_dp/store/key_counts.py::stream_dp.store.key_counts.count_args": 9.0,
        "tests/unit/test_durations.py::TestK::test_y": 5.0, "tests/unit/test_durations.py::test_x[a-1]": 12.3}
    assert nodeid("tests.nowhere", "test_z", ROOT) is None


def test_the_committed_records_name_collected_tests():
    """A renamed or deleted test leaves a stale record: harmless for the order, but regenerate the file then."""
    recorded = load()
    assert recorded, "tests/durations.json is missing or empty"
    files = {node.split("::", 1)[0] for node in recorded}
    assert all((ROOT / f).is_file() for f in files), sorted(f for f in files if not (ROOT / f).is_file())

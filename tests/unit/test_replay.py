"""Replay: reading CSV/JSONL, column mapping, pacing with a fake clock, what is produced."""

from __future__ import annotations

import gzip
import io
import json
import random

import pytest

from stream_dp.config import EventsConfig
from stream_dp.replay import (ColumnMapping, Event, Pacer, Progress, ReplayError, parse_time, read_rows, replay)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes, int | None]] = []
        self.flushed = 0

    def send(self, topic, *, key, value, timestamp_ms=None):
        self.sent.append((topic, key, value, timestamp_ms))

    def flush(self) -> None:
        self.flushed += 1


MOVIELENS = ColumnMapping(user="userId", key="movieId", time="timestamp")


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_csv_rows_map_to_events_and_progress_counts_bytes(tmp_path):
    text = "userId,movieId,rating,timestamp\n1,318,4.0,964982703\n2,296,5.0,964982800\n"
    src = read_rows(write(tmp_path, "ratings.csv", text))
    MOVIELENS.check_columns(src.columns, "ratings.csv")
    events = [MOVIELENS.event(r) for r in src.rows]
    assert events == [Event("1", "318", 964982703.0), Event("2", "296", 964982800.0)]
    assert src.bytes_read == src.size_bytes == len(text)
    src.close()


def test_gzip_and_jsonl(tmp_path):
    text = '{"u": "a", "k": "x", "t": "2026-11-29T00:00:00Z"}\n\n{"u": "b", "k": "y", "t": 1795910400}\n'
    src = read_rows(write(tmp_path, "events.jsonl.gz", text))
    m = ColumnMapping(user="u", key="k", time="t")
    assert [m.event(r) for r in src.rows] == [Event("a", "x", 1795910400.0), Event("b", "y", 1795910400.0)]
    src.close()


def test_missing_column_is_an_error_naming_it_and_the_columns(tmp_path):
    src = read_rows(write(tmp_path, "r.csv", "userId,itemId,timestamp\n1,2,3\n"))
    with pytest.raises(ReplayError, match=r"no column 'movieId' \(the --key-column\); its columns are: userId, itemId"):
        MOVIELENS.check_columns(src.columns, "r.csv")
    src.close()


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(ReplayError, match="does not exist"):
        read_rows(tmp_path / "nope.csv")
    with pytest.raises(ReplayError, match="--format"):
        read_rows(write(tmp_path, "data.txt", "a"))
    src = read_rows(write(tmp_path, "e.jsonl", '{"user": 1}\nnot json\n'))
    with pytest.raises(ReplayError, match="e.jsonl line 2 is not valid JSON"):
        list(src.rows)
    src.close()


def test_rows_without_user_key_or_time_are_skipped_not_half_sent():
    m = ColumnMapping()
    assert m.event({"user": "", "key": "k", "ts": 1}) is None
    assert m.event({"user": "u", "ts": 1}) is None
    assert m.event({"user": "u", "key": "k", "ts": "yesterday"}) is None
    assert m.event({"user": "u", "key": "k"}) is None
    assert ColumnMapping(time=None).event({"user": 5, "key": 6}) == Event("5", "6", None)


def test_time_units_and_offset():
    assert parse_time("1700000000500", "ms") == 1700000000.5
    assert ColumnMapping(time_offset_seconds=10).event({"user": "u", "key": "k", "ts": 5}) == Event("u", "k", 15.0)
    with pytest.raises(ValueError):
        parse_time(float("nan"))


def test_pacer_rate_limit_spaces_events_evenly():
    fake = FakeClock()
    p = Pacer(rate=4, clock=fake.clock, sleep=fake.sleep)
    for _ in range(9):
        p.wait(None)
    assert fake.now == pytest.approx(100.0 + 8 / 4)


def test_pacer_speedup_follows_event_time():
    fake = FakeClock()
    p = Pacer(speedup=3600, clock=fake.clock, sleep=fake.sleep)
    for ts in (1000, 1000 + 3600, 1000 + 3600, 1000 + 7 * 3600):
        p.wait(ts)
    assert fake.now == pytest.approx(107.0)  # seven hours of event time in seven seconds
    assert fake.sleeps == pytest.approx([1.0, 6.0])


def test_pacer_takes_the_slower_of_rate_and_speedup():
    fake = FakeClock()
    p = Pacer(rate=1, speedup=10, clock=fake.clock, sleep=fake.sleep)
    for ts in (0, 1, 2, 100):  # rate binds for the first three, event time for the last
        p.wait(ts)
    assert fake.now == pytest.approx(110.0)


def test_pacer_as_fast_as_possible_never_sleeps():
    fake = FakeClock()
    p = Pacer(clock=fake.clock, sleep=fake.sleep)
    for ts in range(0, 10_000, 1000):
        p.wait(ts)
    assert fake.sleeps == []
    with pytest.raises(ValueError, match="rate"):
        Pacer(rate=0)
    with pytest.raises(ValueError, match="speedup"):
        Pacer(speedup=-1)


def test_replay_produces_json_keyed_by_user_with_event_timestamps():
    producer = FakeProducer()
    fields = EventsConfig(user_field="uid", key_field="item", time_field="when")
    events = [Event("u1", "a", 10.0), None, Event("u2", "b", 11.5), Event("u1", "c", None)]
    stats = replay(events, producer, "events", fields)
    assert (stats.sent, stats.skipped, stats.failed) == (3, 1, 0)
    assert [(t, k) for t, k, _, _ in producer.sent] == [("events", b"u1"), ("events", b"u2"), ("events", b"u1")]
    assert [json.loads(v) for _, _, v, _ in producer.sent] == [
        {"uid": "u1", "item": "a", "when": 10}, {"uid": "u2", "item": "b", "when": 11.5}, {"uid": "u1", "item": "c"}]
    assert [ts for *_, ts in producer.sent] == [10_000, 11_500, None]
    assert producer.flushed == 1
    assert (stats.first_ts, stats.last_ts) == (10.0, 11.5)
    assert "replayed 3 events" in stats.summary() and "skipped 1" in stats.summary()


def test_replay_never_stamps_a_record_time_after_its_event_time():
    """With ``windows.max_event_delay_seconds = 0`` the ingest accepts an event only when record time ≤ body
    time (``ts_ms / 1000.0 <= ts``, the applier's own arithmetic), so the stamp must never be after the event:
    not for sub-millisecond times (rounding stamps half of them after), not where ``int(ts * 1000)`` rounds up in
    floating point (the first three times), and a time in whole milliseconds keeps its millisecond."""
    rnd = random.Random(5)
    sub_ms = [1800000014.6759999, 1800000049.7779999, 1800000012.0279999,
              *(1_800_000_000 + rnd.uniform(0, 3600) for _ in range(20_000))]
    whole_ms = [1.001, 1_800_000_000.123, 964982703.0, *(rnd.randrange(10**12) / 1000 for _ in range(2_000))]
    # the inputs tell the rule from the two obvious ones: each stamps some of them after the event
    assert any(round(t * 1000) / 1000.0 > t for t in sub_ms) and any(int(t * 1000) / 1000.0 > t for t in sub_ms)
    assert any(int(t * 1000) != round(t * 1000) for t in whole_ms)
    producer = FakeProducer()
    replay((Event(f"u{i}", "k", t) for i, t in enumerate(sub_ms + whole_ms)), producer, "t", EventsConfig())
    stamps = [ms for *_, ms in producer.sent]
    for t, ms in zip(sub_ms, stamps):
        assert ms / 1000.0 <= t < (ms + 1) / 1000.0, (t, ms)
    assert stamps[len(sub_ms):] == [round(t * 1000) for t in whole_ms]


def test_replay_limit_and_stop():
    producer = FakeProducer()
    stats = replay((Event(f"u{i}", "k", float(i)) for i in range(100)), producer, "t", EventsConfig(), limit=7)
    assert stats.sent == 7 and len(producer.sent) == 7
    flags = iter([False, False, True])
    stats = replay((Event("u", "k", 1.0) for _ in range(10)), FakeProducer(), "t", EventsConfig(),
                   should_stop=lambda: next(flags))
    assert stats.sent == 2


def test_progress_bar_on_a_terminal_redraws_in_place(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")  # a capable terminal whatever the test runner's environment says
    monkeypatch.setenv("COLUMNS", "160")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    fake = FakeClock()
    out = Tty()
    bar = Progress(out, total=200, clock=fake.clock)
    bar.update(50, event_time=1795910400.0)
    fake.now += 1.0
    bar.update(100)
    bar.finish(200)
    text = out.getvalue()
    # one line, redrawn in place: every redraw returns to the line's start and erases it; one final newline
    assert text.count("\r\x1b[2K") >= 2 and text.count("\n") == 1
    assert text.endswith("\n\x1b[?25h")  # the line ends, and the cursor is shown again
    assert " 25.0%" in text and "100.0%" in text and "2026-11-29 00:00 UTC" in text
    assert text.index(" 25.0%") < text.index(" 50.0%") < text.index("100.0%")
    assert "200 events" in text and "200/s" in text
    silent = io.StringIO()
    Progress(silent, enabled=False).finish(3)
    assert silent.getvalue() == ""


def test_progress_bar_elsewhere_prints_plain_lines_now_and_then():
    fake = FakeClock()
    out = io.StringIO()  # not a terminal: a log file, a pipe
    bar = Progress(out, total=200, clock=fake.clock, interval=0.2)  # a line every 0.2 * 50 = 10 s at most
    bar.update(50, event_time=1795910400.0)
    fake.now += 1.0
    bar.update(100)  # too soon: not printed
    fake.now += 20.0
    bar.update(150)
    bar.finish(200)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and out.getvalue().endswith("\n")
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert [line.split("%")[0].split()[-1] for line in lines] == ["25.0", "75.0", "100.0"]
    assert "2026-11-29 00:00 UTC" in lines[0] and "150 events" in lines[1] and "200 events" in lines[2]


def test_an_error_mid_replay_ends_the_live_display(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    class Broken(FakeProducer):
        def send(self, topic, *, key, value, timestamp_ms=None):
            if self.sent:
                raise RuntimeError("broker gone")
            return super().send(topic, key=key, value=value, timestamp_ms=timestamp_ms)

    out = Tty()
    with pytest.raises(RuntimeError, match="broker gone"):
        replay((Event("u", "k", 1.0) for _ in range(3)), Broken(), "t", EventsConfig(),
               progress=Progress(out, total=3, interval=0.0))
    assert out.getvalue().endswith("\x1b[?25h")  # the cursor rich hid is shown again


def test_headerless_tab_separated_movielens_100k_rows_by_column_position(tmp_path):
    """MovieLens 100K ``u.data``: user id, item id, rating, timestamp; tab-separated, no header."""
    path = tmp_path / "u.data"
    path.write_text("196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n")
    src = read_rows(path, fmt="csv", delimiter="\t", header=False)
    assert src.columns == ("1", "2", "3", "4")
    mapping = ColumnMapping(user="1", key="2", time="4")
    mapping.check_columns(src.columns, str(path))
    events = [mapping.event(row) for row in src.rows]
    src.close()
    assert [(e.user, e.key, e.ts) for e in events] == [("196", "242", 881250949.0), ("186", "302", 891717742.0),
                                                       ("22", "377", 878887116.0)]
    with pytest.raises(ReplayError, match="no column '5'"):
        ColumnMapping(user="1", key="5", time="4").check_columns(src.columns, str(path))
    with pytest.raises(ReplayError, match="one character"):
        read_rows(path, fmt="csv", delimiter="\\t", header=False)


def test_replay_cli_delimiter_names():
    from stream_dp.cli.replay_cmd import _delimiter

    assert [_delimiter(t) for t in ("\\t", "tab", ",", ";", "pipe")] == ["\t", "\t", ",", ";", "|"]
    with pytest.raises(Exception, match="one character"):
        _delimiter("::")


def test_events_stamped_past_the_topics_timestamp_limit_are_counted_not_sent():
    """Apache Kafka 4 refuses a record stamped more than message.timestamp.after.max.ms ahead of its clock, and
    with it the record's whole batch; replay keeps such events back (less a minute for the clocks' difference)
    and counts them as failed, naming the topic config."""
    producer = FakeProducer()
    now = 1_000_000.0
    events = [Event("a", "k", now - 5), Event("b", "k", now + 3540 - 1), Event("c", "k", now + 3540 + 1),
              Event("d", "k", now + 7200), Event("e", "k", None)]
    stats = replay(events, producer, "t", EventsConfig(), max_ahead_s=3600.0, clock=lambda: now)
    assert [key for _, key, _, _ in producer.sent] == [b"a", b"b", b"e"]
    assert (stats.sent, stats.failed) == (3, 2)
    assert "2 failed to send (first: ReplayError: event time 1003541 is more than 3600 s ahead" in stats.summary()
    assert "(message.timestamp.after.max.ms)" in stats.summary()
    # without a limit (Tansu reports none) every event is sent
    assert replay(events, FakeProducer(), "t", EventsConfig(), clock=lambda: now).sent == 5

"""Late events get a log line (stream_dp.ingest.late_notice): at once for the first, then at most one per
interval with the count since the last line, naming windows.start and windows.allowed_lateness_seconds."""

from __future__ import annotations

import logging

from stream_dp.config import WindowsConfig
from stream_dp.ingest.late_notice import LateNotice


def test_first_late_batch_is_logged_at_once_then_rate_limited_with_the_counts(caplog) -> None:
    now = [100.0]
    notice = LateNotice(WindowsConfig(start="1800000000", allowed_lateness_seconds=30), interval=60,
                        clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="stream_dp.ingest.late_notice"):
        notice.add(0)
        notice.add(5)
        for _ in range(10):
            now[0] += 5
            notice.add(2)  # 50 s after the first line: none yet
        now[0] += 15
        notice.add(1)  # 65 s: the second line, with everything since the first
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("dropped 5 late events in the last 0 s (5 since start)")
    assert lines[1].startswith("dropped 21 late events in the last 65 s (26 since start)")
    assert "windows.start = 1800000000" in lines[0] and "windows.allowed_lateness_seconds = 30" in lines[0]

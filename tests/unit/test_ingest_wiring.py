"""Process wiring of the ingest worker: signals, CLI registration, config errors."""

from __future__ import annotations

import signal

from stream_dp.cli import build_parser, main
from workers import ingest


class FakeWorker:
    def __init__(self) -> None:
        self.stops = 0

    @property
    def stopping(self) -> bool:
        return self.stops > 0

    def stop(self) -> None:
        self.stops += 1


def test_first_signal_stops_gracefully_second_exits_hard():
    worker, exits = FakeWorker(), []
    handle = ingest.signal_handler(worker, hard_exit=exits.append)
    handle(signal.SIGTERM, None)
    assert worker.stops == 1 and exits == []
    handle(signal.SIGINT, None)
    assert exits == [ingest.HARD_EXIT_CODE] and worker.stops == 1


def test_cli_has_the_ingest_subcommand():
    args = build_parser().parse_args(["ingest", "--config", "x.toml"])
    assert args.command == "ingest" and args.config == "x.toml"


def test_bad_config_exits_2_and_names_the_setting(tmp_path, caplog):
    bad = tmp_path / "bad.toml"
    bad.write_text("[windows]\nsize_seconds = 0\n")
    assert ingest.main(["--config", str(bad)]) == 2
    assert main(["ingest", "--config", str(bad)]) == 2
    assert "windows.size_seconds" in caplog.text


def test_which_apply_errors_are_retried_with_backoff():
    import redis

    from stream_dp.ingest.applier import redis_transient
    from stream_dp.ingest.store import StaleBoundingState

    assert redis_transient(redis.ConnectionError("gone"))
    assert redis_transient(redis.ResponseError("LOADING Redis is loading the dataset in memory"))
    assert redis_transient(StaleBoundingState("windows [0]: ..."))  # contention: replay the batch later
    assert not redis_transient(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"))
    assert not redis_transient(ValueError("chunk of partition 0: offsets must increase within a chunk"))

"""Process wiring of the workers: one signal policy, CLI registration, config errors, exit codes."""

from __future__ import annotations

import signal

import pytest

from stream_dp.cli import build_parser, main
from stream_dp.runtime import ExitCode, SignalPolicy
from workers import ingest, release


class FakeWorker:
    def __init__(self) -> None:
        self.stops = 0

    @property
    def stopping(self) -> bool:
        return self.stops > 0

    def stop(self) -> None:
        self.stops += 1


def test_first_signal_stops_gracefully_second_exits_hard():
    worker, exits, killed = FakeWorker(), [], []
    handle = SignalPolicy(worker.stop, on_second=lambda: killed.append(True), hard_exit=exits.append)
    handle(signal.SIGTERM, None)
    assert worker.stops == 1 and exits == [] and killed == []
    handle(signal.SIGINT, None)
    assert exits == [ExitCode.SECOND_SIGNAL] == [130] and worker.stops == 1 and killed == [True]


def test_the_policy_installs_on_both_signals_and_restores_the_previous_handlers():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    policy = SignalPolicy(lambda: None, hard_exit=lambda code: None)
    restore = policy.install()
    try:
        assert signal.getsignal(signal.SIGTERM) is policy and signal.getsignal(signal.SIGINT) is policy
    finally:
        restore()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_cli_has_the_ingest_subcommand():
    args = build_parser().parse_args(["ingest", "--config", "x.toml"])
    assert args.command == "ingest" and args.config == "x.toml"


@pytest.mark.parametrize("entry", [ingest.main, release.main, lambda argv: main(["ingest", *argv]),
                                   lambda argv: main(["release", *argv])],
                         ids=["workers.ingest", "workers.release", "stream-dp ingest", "stream-dp release"])
def test_bad_config_exits_2_and_names_the_setting(tmp_path, capsys, entry):
    bad = tmp_path / "bad.toml"
    bad.write_text("[windows]\nsize_seconds = 0\n")
    assert entry(["--config", str(bad)]) == ExitCode.CONFIG == 2
    assert "windows.size_seconds" in capsys.readouterr().err


def test_a_bad_release_flag_exits_2_and_names_its_setting(tmp_path, capsys):
    assert release.main(["--config", str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    good = tmp_path / "good.toml"
    good.write_text("")
    assert release.main(["--config", str(good), "--claim-ttl-seconds", "0"]) == 2
    assert "release.claim_ttl_seconds must be > 0" in capsys.readouterr().err


def test_which_apply_errors_are_retried_with_backoff():
    import redis

    from stream_dp.ingest.applier import redis_transient
    from stream_dp.ingest.store import StaleBoundingState

    assert redis_transient(redis.ConnectionError("gone"))
    assert redis_transient(redis.ResponseError("LOADING Redis is loading the dataset in memory"))
    assert redis_transient(StaleBoundingState("windows [0]: ..."))  # contention: replay the batch later
    assert not redis_transient(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"))
    assert not redis_transient(ValueError("chunk of partition 0: offsets must increase within a chunk"))

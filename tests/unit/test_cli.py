"""The command line's own manners: --version, --log-level before or after the subcommand (one line naming the
option when it is wrong), and examples in every subcommand's --help."""

from __future__ import annotations

import logging
import re
from importlib import metadata

import pytest

from stream_dp.cli import COMMANDS, build_parser, main


def subcommands() -> list[str]:
    return [name for name in build_parser()._subparsers._group_actions[0].choices]  # type: ignore[union-attr]


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"stream-dp {metadata.version('stream-dp')}"


@pytest.mark.parametrize("argv", [["--log-level", "debug", "config", "check"],
                                  ["config", "check", "--log-level", "DEBUG"],
                                  ["--log-level", "ERROR", "config", "check", "--log-level", "debug"]])
def test_log_level_before_or_after_the_subcommand(argv, capsys):
    root = logging.getLogger()
    before = root.level
    try:
        assert main(argv) == 0
        assert root.level == logging.DEBUG  # after the subcommand wins, as the last word
    finally:
        root.setLevel(before)
    capsys.readouterr()


def test_log_level_given_only_before_is_not_reset_by_the_subcommand():
    args = build_parser().parse_args(["--log-level", "warning", "tail"])
    assert args.log_level == "WARNING"
    assert build_parser().parse_args(["tail"]).log_level is None  # $STREAM_DP_LOG_LEVEL or INFO


@pytest.mark.parametrize("argv", [["--log-level", "loud", "config", "check"], ["config", "check", "--log-level", "5"]])
def test_a_bad_log_level_is_one_line_naming_the_option(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --log-level:" in err and "DEBUG, INFO, WARNING, ERROR, CRITICAL" in err and "Traceback" not in err


def test_every_subcommand_has_examples_that_run_it(capsys):
    names = subcommands()
    assert len(names) == len(COMMANDS)
    for name in names:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        text = capsys.readouterr().out
        assert "\nexamples:\n" in text, name
        examples = text.split("\nexamples:\n", 1)[1]
        runs = [line for line in examples.splitlines() if re.match(rf"\s+(\S+=\S+ )*stream-dp {name}\b", line)]
        assert len(runs) >= 2, (name, examples)
        assert "--log-level" in text, name


def test_tail_names_every_release_type_it_accepts(capsys):
    with pytest.raises(SystemExit):
        main(["tail", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for rtype in ("topk", "alerts", "sample", "argmax", "watch_topk", "histogram"):
        assert rtype in text
    assert "'status' is also accepted: schema 1 reserves it, and no release of this version publishes one" in text

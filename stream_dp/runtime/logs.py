"""A process's logging: configured once, every line masked (:mod:`stream_dp.redact`), and the ``--log-level``
option every command shares."""

from __future__ import annotations

import argparse
import faulthandler
import io
import logging
import os

from stream_dp import redact

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVEL_VARIABLE = "STREAM_DP_LOG_LEVEL"  # a tool variable (config.TOOL_VARIABLES), not a setting


def configure_logging(level: str | None = None) -> None:
    """Configure the root logger once for this process (later calls only change the level).

    ``level`` defaults to ``$STREAM_DP_LOG_LEVEL`` or INFO. kafka-python narrates every connection at INFO,
    so its logger is held at WARNING or above. A fatal signal on a Python thread dumps every thread's stack
    to stderr (:mod:`faulthandler`). URL credentials are masked from here on;
    a loaded config's secrets once :func:`load_config_or_report` registers them."""
    name = (level or os.environ.get(LOG_LEVEL_VARIABLE) or "INFO").upper()
    root = logging.getLogger()
    if not getattr(root, "_stream_dp_configured", False):
        logging.basicConfig(format=LOG_FORMAT)
        root._stream_dp_configured = True  # type: ignore[attr-defined]
        # a fatal signal on a Python thread (a crash in a C extension) prints every thread's Python stack to
        # stderr -- the log -- instead of the process vanishing without a line (not where stderr is no file:
        # a test capturing it in-process)
        try:
            faulthandler.enable()
        except (io.UnsupportedOperation, AttributeError, ValueError):
            pass
    root.setLevel(name)
    logging.getLogger("kafka").setLevel(max(logging.WARNING, root.level))
    redact.install()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    """A ``--log-level`` value, any case; argparse turns the ValueError into one line naming the option."""
    name = text.upper()
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_LEVELS)}")
    return name


def add_log_level_option(parser: argparse.ArgumentParser, *, default: object = None) -> None:
    """``--log-level`` (default ``$STREAM_DP_LOG_LEVEL`` or INFO). A subcommand's parser gets it with
    ``default=argparse.SUPPRESS``, so ``stream-dp tail --log-level DEBUG`` works as ``stream-dp --log-level
    DEBUG tail`` does, and leaving it out after the subcommand keeps the one given before."""
    parser.add_argument("--log-level", default=default, type=log_level, metavar="LEVEL",
                        help=f"{', '.join(LOG_LEVELS)} (default: ${LOG_LEVEL_VARIABLE} or INFO)")

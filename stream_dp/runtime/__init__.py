"""One way to run a stream-dp process: logging, config loading, start checks, /metrics, signals, exit codes.

Every long-running entry point (``python -m workers.ingest`` / ``workers.release``, ``stream-dp ingest`` /
``release`` / ``demo``) goes through these helpers, so they agree on:

- **logging**, configured once per process (:func:`configure_logging`), every line masked by
  :mod:`stream_dp.redact` (:mod:`~stream_dp.runtime.logs`);
- **the config**, loaded with a readable error naming the setting (and the environment variable that set
  it) or refused with :data:`ExitCode.CONFIG` (:func:`load_config_or_report`; :mod:`~stream_dp.runtime.settings`);
- **start checks** a worker must pass before it touches data (:func:`worker_preflight`): the budget plan,
  the Redis eviction policy, the public release schedule and the topic contract (:mod:`stream_dp.topics`;
  :mod:`~stream_dp.runtime.start_checks`);
- **the signal policy** (:class:`SignalPolicy`): the first SIGTERM/SIGINT asks for a graceful stop (the
  current batch or window finishes), the second exits at once with :data:`ExitCode.SECOND_SIGNAL`;
- **exit codes** (:class:`ExitCode`, tabled in README.md).

:func:`run_ingest_worker` and :func:`run_release_worker` (:mod:`~stream_dp.runtime.lifecycle`) put these
together around the workers that :mod:`stream_dp.ingest.service` and :mod:`stream_dp.release.service`
assemble (those never import this package: the runtime sits above the library, below the entry points).
"""

from stream_dp.runtime.lifecycle import (ExitCode, Running, SignalPolicy, process_main, run_ingest_worker,
                                         run_release_worker, run_worker)
from stream_dp.runtime.logs import LOG_LEVELS, add_log_level_option, configure_logging, log_level
from stream_dp.runtime.settings import add_config_option, load_config_or_report, with_devstack, with_release_flags
from stream_dp.runtime.start_checks import (WORKER_TOPICS, budget_plan_or_report, redis_credentials_or_report,
                                            redis_preflight_or_report, schedule_or_report, serve_metrics_or_report,
                                            topics_preflight_or_report, worker_preflight)

__all__ = ["LOG_LEVELS", "WORKER_TOPICS", "ExitCode", "Running", "SignalPolicy", "add_config_option",
           "add_log_level_option", "budget_plan_or_report", "configure_logging", "load_config_or_report", "log_level",
           "process_main", "redis_credentials_or_report", "redis_preflight_or_report", "run_ingest_worker",
           "run_release_worker", "run_worker", "schedule_or_report", "serve_metrics_or_report",
           "topics_preflight_or_report", "with_devstack", "with_release_flags", "worker_preflight"]

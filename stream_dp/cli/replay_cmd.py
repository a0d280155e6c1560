"""``stream-dp replay``: a CSV / JSON-lines file (or the generated demo stream) → the input topic."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from collections.abc import Iterable, Iterator

from stream_dp.runtime import ExitCode, load_config_or_report
from stream_dp.replay import (ColumnMapping, Event, Pacer, Progress, ReplayError, read_rows, replay,
                              sort_by_time)

EXAMPLES = """\
examples:
  # MovieLens ratings.csv (sorted by user, so sort by time first), as fast as possible
  stream-dp replay ratings.csv --user-column userId --key-column movieId --time-column timestamp --sort-by-time
  # the generated MovieLens-style stream, one day of event time per 10 seconds
  stream-dp replay --generate --speedup 8640
  # JSON lines with the configured field names, at most 500 events per second
  stream-dp replay events.jsonl --rate 500
  # MovieLens 100K u.data: tab-separated, no header; columns by 1-based position (user, item, rating, time)
  stream-dp replay u.data --no-header --delimiter '\t' --user-column 1 --key-column 2 --time-column 4 --sort-by-time
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay", help="replay a CSV or JSON-lines file (or generated ratings) into the events topic",
        description="Produce every row of FILE to the events topic as the JSON event ingest reads, keyed by "
        "user. Pacing: as fast as possible (default), --rate events per second, and/or --speedup "
        "(event time runs that many times faster than wall time).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("file", nargs="?", help="input file: .csv/.tsv (header row) or .jsonl/.ndjson, optionally .gz")
    src.add_argument("--generate", action="store_true",
                     help="replay the in-tree MovieLens-style ratings stream (stream_dp.dev.demo_data) instead of a file")
    p.add_argument("--config", help="TOML config (default: config/stream-dp.toml); gives broker, topic, field names")
    p.add_argument("--format", choices=("csv", "jsonl"), help="input format (default: from the file name; csv "
                   "with --no-header or --delimiter)")
    p.add_argument("--no-header", action="store_true",
                   help="CSV without a header row: name columns by 1-based position (--user-column 1 ...)")
    p.add_argument("--delimiter", type=_delimiter, metavar="CHAR",
                   help="CSV field separator: one character, or \\t / tab (default: tab for .tsv, else comma)")
    p.add_argument("--user-column", help="column holding the user id (default: events.user_field; "
                   "userId with --generate)")
    p.add_argument("--key-column", help="column holding the key (default: events.key_field; title with --generate)")
    p.add_argument("--time-column", help="column holding the event time (default: events.time_field; "
                   "timestamp with --generate); 'none': use the broker's record time")
    p.add_argument("--time-unit", choices=("s", "ms", "us", "ns"), default="s",
                   help="unit of numeric times (default: %(default)s); ISO 8601 strings also work")
    p.add_argument("--time-offset", type=float, default=0.0, metavar="SECONDS",
                   help="add this to every event time (e.g. move an old data set to recent days)")
    p.add_argument("--sort-by-time", action="store_true",
                   help="replay in event-time order (reads the file into memory first); needed for files sorted "
                   "by user, such as MovieLens ratings.csv, or most events arrive after their window closed")
    p.add_argument("--rate", type=float, help="at most this many events per second")
    p.add_argument("--speedup", type=float, help="play event time this many times faster than real time")
    p.add_argument("--limit", type=int, help="stop after this many events")
    p.add_argument("--topic", help="target topic (default: kafka.events_topic)")
    p.add_argument("--partitions", type=int, default=None,
                   help="partitions if the topic must be created (default: kafka.events_partitions); it is "
                   "created with the topic contract's configs (`stream-dp topics create`)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    gen = p.add_argument_group("generated stream (--generate)")
    gen.add_argument("--seed", type=int, default=7, help="generator seed (default: %(default)s)")
    gen.add_argument("--days", type=int, default=28, help="days of ratings (default: %(default)s)")
    gen.add_argument("--users", type=int, default=6000, help="users (default: %(default)s)")
    gen.add_argument("--movies", type=int, default=3000, help="movies (default: %(default)s)")
    p.set_defaults(func=run)


def _delimiter(text: str) -> str:
    """``--delimiter``: one character, or a name: ``\\t``, ``tab``, ``comma``, ``semicolon``, ``pipe``, ``space``."""
    named = {"\\t": "\t", "tab": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}
    value = named.get(text.lower(), text)
    if len(value) != 1:
        raise argparse.ArgumentTypeError(f"must be one character (or \\t, tab), got {text!r}")
    return value


def mapping_from_args(args: argparse.Namespace, fields_user: str, fields_key: str, fields_time: str) -> ColumnMapping:
    """The column mapping: explicit flags, else MovieLens names for --generate, else the config's field names."""
    generated = bool(getattr(args, "generate", False))
    time_col = args.time_column or ("timestamp" if generated else fields_time)
    return ColumnMapping(
        user=args.user_column or ("userId" if generated else fields_user),
        key=args.key_column or ("title" if generated else fields_key),
        time=None if time_col.lower() == "none" else time_col,
        time_unit=args.time_unit,
        time_offset_seconds=args.time_offset,
    )


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from stream_dp import connections, topics
    from stream_dp.dev import demo_data
    from stream_dp.broker_reach import BOOTSTRAP_ERRORS, unreachable

    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    if not cfg.kafka.bootstrap_servers:
        print("config error: kafka.bootstrap_servers is empty; set it (or STREAM_DP_KAFKA__BOOTSTRAP_SERVERS), "
              "or run `stream-dp demo`, which starts a local broker", file=sys.stderr)
        return 1
    f = cfg.events
    mapping = mapping_from_args(args, f.user_field, f.key_field, f.time_field)
    source = None
    fraction = None
    total = None
    try:
        if args.generate:
            ratings = demo_data.generate_ratings(users=args.users, movies=args.movies, days=args.days, seed=args.seed)
            rows: Iterator = demo_data.rows(ratings)
            total = len(ratings) if args.limit is None else min(len(ratings), args.limit)
            mapping.check_columns(demo_data.CSV_COLUMNS, "the generated stream")
        else:
            fmt = args.format or ("csv" if args.no_header or args.delimiter else None)
            source = read_rows(args.file, fmt=fmt, delimiter=args.delimiter, header=not args.no_header)
            mapping.check_columns(source.columns, args.file)
            rows = source.rows
            if source.size_bytes and args.limit is None:
                size, src = source.size_bytes, source
                fraction = lambda: src.bytes_read / size  # noqa: E731
            elif args.limit:
                total = args.limit
        pacer = Pacer(rate=args.rate, speedup=args.speedup)
    except (ReplayError, ValueError) as exc:
        print(f"replay error: {exc}", file=sys.stderr)
        if source is not None:
            source.close()
        return 1

    # kafka-python logs every failed connection attempt; replay reports what they amount to itself
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set()) if threading.current_thread() is threading.main_thread() else None
    topic = args.topic or cfg.kafka.events_topic
    producer = None
    try:
        events_cfg = cfg.kafka if args.partitions is None else dataclasses.replace(
            cfg.kafka, events_partitions=args.partitions)
        names = {"events": topic}
        topics.create(events_cfg, ("events",), names=names)
        report = topics.check(events_cfg, ("events",), names=names)  # e.g. a finite retention would delete history
        if report.breaches:
            print(f"replay error: {report.breaches[0].line()}", file=sys.stderr)
            return ExitCode.CONFIG
        producer = connections.kafka_producer(cfg.kafka)
        events: Iterable[Event | None] = (mapping.event(row) for row in rows)
        if args.sort_by_time:
            events = sort_by_time(events)
            fraction = None
            total = len(events) if args.limit is None else min(len(events), args.limit)
        progress = Progress(total=total, enabled=not args.no_progress)
        ahead_ms = report.timestamp_after_max_ms.get(topic)
        stats = replay(events, producer, topic, f, pacer=pacer, progress=progress, fraction=fraction,
                       limit=args.limit, should_stop=stop.is_set,
                       max_ahead_s=ahead_ms / 1000 if ahead_ms is not None else None)
    except (ReplayError, topics.TopicContractError) as exc:
        print(f"replay error: {exc}", file=sys.stderr)
        return 1
    except KafkaException as exc:  # the topic contract's admin client: no broker answered (one line, exit 2)
        print(f"replay: {unreachable(cfg.kafka.bootstrap_servers)} ({exc.args[0].str()})", file=sys.stderr)
        return ExitCode.CONFIG
    except BOOTSTRAP_ERRORS:  # the producer found no broker: one line, not a traceback
        print(f"replay: {unreachable(cfg.kafka.bootstrap_servers)}", file=sys.stderr)
        return ExitCode.CONFIG
    finally:
        if producer is not None:
            producer.close()
        if source is not None:
            source.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    print(stats.summary() + (" (interrupted)" if stop.is_set() else ""), file=sys.stderr)
    return 0 if stats.failed == 0 else 1

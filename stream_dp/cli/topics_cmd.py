"""``stream-dp topics create|check``: make the service's topics with the contract's configs, or check them
(:mod:`stream_dp.topics`)."""

from __future__ import annotations

import argparse
import sys

from stream_dp.runtime import ExitCode, add_config_option, load_config_or_report


EXAMPLES = """\
examples:
  stream-dp topics create                       # make the missing topics with the contract's settings
  stream-dp topics check --config prod.toml     # one line per breach: topic, setting, the fix (exit 2)
  stream-dp topics adopt                        # after the events topic was recreated, workers stopped
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "topics", help="create or check the events, dead-letter and releases topics",
        description="create: make each missing topic with the contract's partitions, replication factor and "
        "configs (existing topics are checked, not changed). check: list every way a topic breaks the "
        "contract, one line each naming the topic, the config and the fix (exit code 2 if any). adopt: after the "
        "events topic was deleted and created again, with every ingest worker stopped: count the new topic from "
        "its start (forgets the old topic's applied offsets, keeps counts and contribution bounds).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("create", "check", "adopt"))
    add_config_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from stream_dp import topics

    cfg = load_config_or_report(args.config)
    if cfg is None:
        return ExitCode.CONFIG
    if not cfg.kafka.bootstrap_servers:
        print("config error: kafka.bootstrap_servers is empty; set it, or start `stream-dp devstack up`",
              file=sys.stderr)
        return ExitCode.CONFIG
    if args.action == "adopt":
        return _adopt(cfg)
    try:
        admin = topics.admin_client(cfg.kafka)
        if args.action == "create":
            for name in topics.create(cfg.kafka, admin=admin):
                print(f"created {name}")
        report = topics.check(cfg.kafka, admin=admin)
    except KafkaException as exc:
        print(f"topics error: the brokers at {cfg.kafka.bootstrap_servers} (kafka.bootstrap_servers) did not "
              f"answer: {exc.args[0].str()}", file=sys.stderr)
        return ExitCode.FAILURE
    except topics.TopicContractError as exc:
        print(f"topics error: {exc}", file=sys.stderr)
        return ExitCode.FAILURE
    for topic, names in report.unverified.items():
        print(f"topic {topic!r}: the broker does not report {', '.join(names)}; not checked", file=sys.stderr)
    for breach in report.breaches:
        print(breach.line(), file=sys.stderr)
    if report.breaches:
        return ExitCode.CONFIG
    print(f"topics OK: {cfg.kafka.events_topic}, {cfg.kafka.dead_letter_topic}, {cfg.kafka.releases_topic}",
          file=sys.stderr)
    return ExitCode.OK


def _adopt(cfg) -> int:
    """``topics adopt``: record the events topic's current id and forget the old topic's applied offsets."""
    from confluent_kafka import KafkaException

    from stream_dp import topics
    from stream_dp.connections import redis_client
    from stream_dp.ingest import topic_identity
    from stream_dp.store.keys import Keys

    topic, group = cfg.kafka.events_topic, cfg.kafka.ingest_group_id
    client = redis_client(cfg.redis)
    try:
        admin = topics.admin_client(cfg.kafka)
        topic_id = topic_identity.current_topic_id(admin, topic)
        if topic_id is None:
            print(f"topics error: events topic {topic!r} does not exist: run `stream-dp topics create` first",
                  file=sys.stderr)
            return ExitCode.CONFIG
        rewound = topic_identity.rewind_group(admin, group, topic)
        forgotten = topic_identity.adopt(client, Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout), topic, topic_id)
    except KafkaException as exc:
        print(f"topics error: {exc.args[0].str()} (stop every ingest worker of group {group!r} first)",
              file=sys.stderr)
        return ExitCode.FAILURE
    finally:
        client.close()
    print(f"adopted events topic {topic!r} (topic id {topic_id}): group {group!r} starts at the earliest offset of "
          f"its {rewound} partition(s); the old topic's applied offsets of {forgotten} window shard(s) forgotten "
          "(counts and contribution bounds kept; an event present in both topics may count twice within the "
          "bounds)", file=sys.stderr)
    return ExitCode.OK

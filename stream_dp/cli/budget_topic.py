"""``stream-dp budget verify --against-topic`` and ``stream-dp budget rebuild --from-topic``: the ledger and
the releases topic, the topic being the ground truth of what was spent (docs/privacy.md §4c).

``verify --against-topic`` reads the whole releases topic and checks it against the ledger both ways
(:mod:`stream_dp.accounting.topic_audit`); exit code 1 on any problem. ``rebuild --from-topic`` restores
the ledger's charges (:mod:`stream_dp.release.ledger_rebuild`) and the released windows
(:mod:`stream_dp.release.schedule_rebuild`) from the topic after Redis lost them, then writes a new ledger
epoch so that release workers start again. Stop the release workers first (a worker that finds the ledger
lost stops by itself, with exit code 2).
"""

from __future__ import annotations

from typing import TextIO

from stream_dp.accounting.ledger import Ledger
from stream_dp.accounting.topic_audit import AuditReport
from stream_dp.config import Config


def audit_topic(cfg: Config, ledger: Ledger) -> AuditReport:
    """The audit of the ledger against the whole releases topic (every scope of either)."""
    from stream_dp.accounting.budget import LIFETIME_SCOPE
    from stream_dp.accounting.topic_audit import audit, ledger_view
    from stream_dp.release.topic_reader import read_releases

    contents = read_releases(cfg.kafka)
    scopes = set(ledger.scopes()) | {pub.scope for pub in contents.records}
    if ledger.lifetime_cap is not None:
        scopes.add(LIFETIME_SCOPE)
    return audit(contents, ledger_view(ledger, sorted(scopes)), lifetime=ledger.lifetime_cap is not None)


def rebuild_from_topic(cfg: Config, ledger: Ledger, out: TextIO, *, force: bool = False) -> bool:
    """Restore the ledger and the released windows from the releases topic; print what was done. Without
    ``force``, nothing is done (False) when the ledger holds its epoch and every published charge: a rebuild
    rewrites each scope on the topic, dropping what was not published (a live worker's release in flight)."""
    from stream_dp.accounting.topic_audit import audit, ledger_view
    from stream_dp.release.ledger_rebuild import finish, first_records, rebuild
    from stream_dp.release.schedule_rebuild import restore_windows
    from stream_dp.release.topic_reader import read_releases
    from stream_dp.state_epochs import EpochMarker

    contents = read_releases(cfg.kafka)
    if not force and EpochMarker(ledger.redis, ledger.keys.ledger_epoch()).read() is not None:
        check = audit(contents, ledger_view(ledger, sorted({pub.scope for pub in contents.records})))
        if not any("is not in the ledger" in problem for problem in check.problems):
            print(f"the ledger holds its epoch and the charge of every release on {contents.topic}: nothing was "
                  "lost, nothing rebuilt (--force rewrites each scope on the topic from it anyway; stop the "
                  "release workers first)", file=out)
            return False
    for where in contents.invalid:
        print(f"skipped a message that is not a release record: {where}", file=out)
    if contents.trimmed:
        print(f"the releases topic's partitions {contents.trimmed} lost their oldest records to retention: the "
              "charges of those releases cannot be restored (their periods, and the lifetime scope, forget "
              "them)", file=out)
    report = rebuild(ledger, contents.records)
    windows = restore_windows(ledger.redis, cfg, first_records(contents.records))
    report.epoch = finish(ledger)
    print(f"rebuilt from {contents.topic}: {report.summary()}", file=out)
    print(f"release bookkeeping: {windows.summary()}", file=out)
    return True

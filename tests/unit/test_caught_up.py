"""The caught-up check's rule (stream_dp/ingest/caught_up.py), on a scripted leader and a hand-moved clock.

The leader's answers are scripted here because the rule is about *when* to ask and what an answer means;
that the backends' ``end_offset`` is the leader's real answer is tested on real brokers
(tests/integration/test_ingest_consumers.py), and the rule end to end by SIGKILLing a leader of a
3-broker Apache Kafka (tests/chaos/test_kafka_leader_kills.py).
"""

from __future__ import annotations

from kafka import TopicPartition

from stream_dp.ingest.caught_up import MAX_VALID_FOR, CaughtUpCheck

P0, P1, P2 = (TopicPartition("events", p) for p in range(3))


class Leader:
    """Answers end offsets from ``ends`` (None: no answer) and records who was asked."""

    def __init__(self, **ends: int | None) -> None:
        self.ends = {TopicPartition("events", int(p[1:])): v for p, v in ends.items()}
        self.asked: list[int] = []

    def end_offset(self, tp: TopicPartition, timeout_s: float) -> int | None:
        self.asked.append(tp.partition)
        return self.ends[tp]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_zero_lag_stays_only_when_the_leader_confirms_it() -> None:
    leader, clock = Leader(p0=10, p1=15, p2=None), Clock()
    check = CaughtUpCheck(leader, idle_timeout=8.0, clock=clock)
    out = check.confirm({P0: 0, P1: 0, P2: 0}, {P0: 10, P1: 10, P2: 10})
    # p0 confirmed; p1's leader has 5 records the fetches have not brought (stale fetched mark): lagging;
    # p2's leader did not answer: unknown (neither caught up nor busy)
    assert out == {P0: 0, P1: 5}
    assert leader.asked == [0, 1, 2]


def test_a_lagging_partition_is_not_asked() -> None:
    leader = Leader(p0=99)
    assert CaughtUpCheck(leader, idle_timeout=8.0).confirm({P0: 3}, {P0: 10}) == {P0: 3}
    assert leader.asked == []


def test_a_confirmation_expires_well_before_the_idle_timeout() -> None:
    """The last report before a stall must turn 'not caught up' before the partition could go idle."""
    leader, clock = Leader(p0=10), Clock()
    check = CaughtUpCheck(leader, idle_timeout=8.0, clock=clock)
    assert check.valid_for == 2.0
    check.confirm({P0: 0}, {P0: 10})
    clock.now += 1.9
    assert check.confirm({P0: 0}, {P0: 10}) == {P0: 0} and leader.asked == [0]  # still confirmed
    clock.now += 0.2
    leader.ends[P0] = None  # the leader died
    assert check.confirm({P0: 0}, {P0: 10}) == {}
    assert CaughtUpCheck(leader, idle_timeout=3600.0).valid_for == MAX_VALID_FOR


def test_one_unanswered_ask_ends_the_steps_asking_and_is_not_repeated_before_valid_for() -> None:
    leader, clock = Leader(p0=None, p1=10, p2=10), Clock()
    check = CaughtUpCheck(leader, idle_timeout=8.0, clock=clock)
    assert check.confirm({P0: 0, P1: 0, P2: 0}, {P0: 10, P1: 10, P2: 10}) == {}
    assert leader.asked == [0]  # a dead leader blocks the loop for one timeout per step, not one per partition
    assert check.confirm({P0: 0, P1: 0, P2: 0}, {P0: 10, P1: 10, P2: 10}) == {P1: 0, P2: 0}
    assert leader.asked == [0, 1, 2]  # p0 not asked again yet, the others were
    clock.now += 2.0
    leader.ends[P0] = 10
    assert check.confirm({P0: 0, P1: 0, P2: 0}, {P0: 10, P1: 10, P2: 10}) == {P0: 0, P1: 0, P2: 0}


def test_a_leader_that_under_reports_never_lowers_the_cached_lag() -> None:
    """Tansu under-reports ListOffsets: an answer below the position confirms, it never invents records."""
    leader = Leader(p0=4)
    assert CaughtUpCheck(leader, idle_timeout=8.0).confirm({P0: 0}, {P0: 10}) == {P0: 0}


def test_a_handed_over_partition_is_confirmed_afresh() -> None:
    leader, clock = Leader(p0=10), Clock()
    check = CaughtUpCheck(leader, idle_timeout=8.0, clock=clock)
    check.confirm({P0: 0}, {P0: 10})
    check.forget({P0})
    leader.ends[P0] = 12
    assert check.confirm({P0: 0}, {P0: 10}) == {P0: 2}

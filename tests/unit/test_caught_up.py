"""The caught-up check's rule (stream_dp/ingest/caught_up.py), on scripted answers and a hand-moved clock.

The leader's answers are scripted here (futures the test settles) because the rule is about *when* an answer
confirms and what it means; that :class:`LeaderEndOffsets` gets the leader's real answer is tested on both
real brokers (tests/integration/test_ingest_consumers.py), and the rule end to end by SIGKILLing a leader
of a 3-broker Apache Kafka (tests/chaos/test_kafka_leader_kills.py, which fails without it).
"""

from __future__ import annotations

from concurrent.futures import Future

from kafka import TopicPartition

from stream_dp.ingest.caught_up import CaughtUpCheck

P0, P1, P2 = (TopicPartition("events", p) for p in range(3))
AT = {P0: 10, P1: 10, P2: 10}  # the positions


class Asker:
    """Records each question; the test answers it with :meth:`answer`."""

    def __init__(self) -> None:
        self.questions: list[dict[TopicPartition, Future[int]]] = []

    def ask(self, partitions: list[TopicPartition], timeout_s: float) -> dict[TopicPartition, Future[int]]:
        self.questions.append({tp: Future() for tp in partitions})
        return self.questions[-1]

    def answer(self, **ends: int | None) -> None:
        for name, end in ends.items():
            f = self.questions[-1][TopicPartition("events", int(name[1:]))]
            f.set_result(end) if end is not None else f.set_exception(TimeoutError("no leader"))

    def asked(self) -> list[list[int]]:
        return [sorted(tp.partition for tp in q) for q in self.questions]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _check(valid_for: float = 2.0) -> tuple[CaughtUpCheck, Asker, Clock]:
    asker, clock = Asker(), Clock()
    return CaughtUpCheck(asker, valid_for=valid_for, clock=clock), asker, clock


def test_a_zero_lag_counts_only_once_the_leader_confirmed_it() -> None:
    check, asker, clock = _check()
    # no answer yet: unknown (neither caught up nor busy), and the question goes out without waiting
    assert check.confirm({P0: 0, P1: 0, P2: 0}, AT) == {}
    assert asker.asked() == [[0, 1, 2]]
    asker.answer(p0=10, p1=15, p2=None)
    clock.now += 0.1
    # p0 confirmed; p1's leader has 5 records its fetches have not brought (a stale fetched mark): lagging;
    # p2's leader did not answer: still unknown
    assert check.confirm({P0: 0, P1: 0, P2: 0}, AT) == {P0: 0, P1: 5}


def test_a_lagging_partition_is_not_asked() -> None:
    check, asker, _clock = _check()
    assert check.confirm({P0: 3}, AT) == {P0: 3}
    assert asker.asked() == []


def test_an_answer_confirms_for_valid_for_from_when_it_was_asked_and_is_renewed_at_half() -> None:
    check, asker, clock = _check(valid_for=2.0)
    check.confirm({P0: 0}, AT)
    asker.answer(p0=10)
    clock.now += 0.5
    assert check.confirm({P0: 0}, AT) == {P0: 0} and len(asker.questions) == 1
    clock.now += 0.6  # 1.1 s after the question: renewed, still confirmed meanwhile
    assert check.confirm({P0: 0}, AT) == {P0: 0} and len(asker.questions) == 2
    clock.now += 1.0  # 2.1 s after the answered question, the renewal unanswered (the leader died)
    assert check.confirm({P0: 0}, AT) == {}


def test_one_question_in_flight_at_a_time() -> None:
    check, asker, clock = _check()
    check.confirm({P0: 0}, AT)
    clock.now += 3.0
    check.confirm({P0: 0, P1: 0}, AT)
    assert asker.asked() == [[0]]  # the first is unanswered: no second question piles up
    asker.answer(p0=None)
    check.confirm({P0: 0, P1: 0}, AT)
    assert asker.asked() == [[0], [0, 1]]


def test_a_leader_that_under_reports_never_lowers_the_cached_lag() -> None:
    """Tansu counts a batch as one offset: an answer below the position confirms; it never invents records."""
    check, asker, clock = _check()
    check.confirm({P0: 0}, AT)
    asker.answer(p0=4)
    assert check.confirm({P0: 0}, AT) == {P0: 0}
    assert check.confirm({P0: 7}, AT) == {P0: 7}


def test_a_handed_over_partition_is_confirmed_afresh() -> None:
    check, asker, clock = _check()
    check.confirm({P0: 0}, AT)
    asker.answer(p0=10)
    assert check.confirm({P0: 0}, AT) == {P0: 0}
    check.forget({P0})
    assert check.confirm({P0: 0}, AT) == {}

"""Kafka error classification and the retry loop (pure)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_jobs.sink.kafka_errors import ErrorKind, TransactionError, call_with_retries, classify


def error(code: int, **flags: bool) -> KafkaError:
    return KafkaError(code, "test", **flags)


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (error(KafkaError._TIMED_OUT, retriable=True), ErrorKind.RETRY),
        (error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=True), ErrorKind.RETRY),
        (error(KafkaError._STATE, txn_requires_abort=True), ErrorKind.ABORT),
        (error(KafkaError._FENCED, fatal=True), ErrorKind.FATAL),
        (error(KafkaError.PRODUCER_FENCED), ErrorKind.FATAL),
        (error(KafkaError.INVALID_PRODUCER_EPOCH, txn_requires_abort=True), ErrorKind.FATAL),
        (error(KafkaError.TOPIC_AUTHORIZATION_FAILED), ErrorKind.FATAL),
    ],
)
def test_classify(err: KafkaError, kind: ErrorKind) -> None:
    assert classify(err) is kind


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def failing(times: int, err: KafkaError) -> object:
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise KafkaException(err)
        return "done"

    return call


def test_retriable_errors_are_retried_until_success() -> None:
    clock = FakeClock()
    call = failing(3, error(KafkaError._TIMED_OUT, retriable=True))
    assert call_with_retries("app.q.0", "commit", call, deadline_s=10, clock=clock, pause=clock.pause) == "done"  # type: ignore[arg-type]


def test_retriable_errors_give_up_at_the_deadline() -> None:
    clock = FakeClock()
    call = failing(1000, error(KafkaError._TIMED_OUT, retriable=True))
    with pytest.raises(TransactionError) as caught:
        call_with_retries("app.q.0", "commit", call, deadline_s=5, clock=clock, pause=clock.pause)  # type: ignore[arg-type]
    assert caught.value.kind is ErrorKind.RETRY
    assert clock.now <= 5


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (error(KafkaError._STATE, txn_requires_abort=True), ErrorKind.ABORT),
        (error(KafkaError._FENCED, fatal=True), ErrorKind.FATAL),
    ],
)
def test_abort_and_fatal_are_not_retried(err: KafkaError, kind: ErrorKind) -> None:
    clock = FakeClock()
    with pytest.raises(TransactionError, match=r"app\.q\.3: commit failed") as caught:
        call_with_retries("app.q.3", "commit", failing(1, err), deadline_s=10, clock=clock, pause=clock.pause)  # type: ignore[arg-type]
    assert caught.value.kind is kind
    assert clock.now == 0

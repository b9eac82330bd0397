"""Kafka errors, classified: what the transactional sink does about each kind.

- ``RETRY``: retriable (timeouts, coordinator moving, not-enough-replicas): try the same call
  again with backoff until the deadline runs out.
- ``ABORT``: the transaction cannot commit but the producer is sound (``txn_requires_abort``):
  abort it and fail this attempt, so Spark retries the partition from the start.
- ``FATAL``: fenced by a newer instance of the same ``transactional.id``, or any fatal error:
  the producer is dead; fail the task and never use that producer again.

The classification is pure (``classify``); ``call_with_retries`` is the one loop that applies it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from ikkai.errors import IkkaiError

T = TypeVar("T")

_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class ErrorKind(enum.Enum):
    RETRY = "retry"
    ABORT = "abort"
    FATAL = "fatal"


class TransactionError(IkkaiError):
    """A Kafka transaction of the sink failed; ``kind`` says whether the producer may live on."""

    def __init__(self, transactional_id: str, step: str, error: KafkaError, kind: ErrorKind, fix: str) -> None:
        super().__init__(f"transactional.id {transactional_id}: {step} failed ({error.name()}: {error.str()})", fix=fix)
        self.transactional_id = transactional_id
        self.step = step
        self.code = error.code()
        self.kind = kind


def classify(error: KafkaError) -> ErrorKind:
    if error.fatal() or error.code() in _FENCED:
        return ErrorKind.FATAL
    if error.txn_requires_abort():
        return ErrorKind.ABORT
    if error.retriable():
        return ErrorKind.RETRY
    return ErrorKind.FATAL


def call_with_retries(
    transactional_id: str,
    step: str,
    call: Callable[[], T],
    *,
    deadline_s: float,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, retried while its errors are retriable and the deadline allows; else ``TransactionError``."""
    give_up_at = clock() + deadline_s
    backoff = 0.1
    while True:
        try:
            return call()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            kind = classify(error)
            if kind is ErrorKind.RETRY and clock() + backoff < give_up_at:
                pause(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            raise TransactionError(transactional_id, step, error, kind, fix=_FIXES[kind]) from exc


_FIXES = {
    ErrorKind.RETRY: "the broker kept failing past the retry deadline; Spark retries the attempt, check broker health",
    ErrorKind.ABORT: "the transaction was aborted; Spark retries the attempt from the start",
    ErrorKind.FATAL: "this producer is fenced or broken and is discarded; another instance of the job may be running",
}

"""Errors of the outbox: emitting requests, reading receipts, running the reference receiver.

The root ``OutboxError`` and the contract's refusal ``OutboxRequestError`` live with the contract
(``ikkai.contract.outbox``), which the jobs build requests with too; they are handed on here.
"""

from __future__ import annotations

from ikkai.contract.outbox import OutboxError, OutboxRequestError

__all__ = [
    "BadReceiptError",
    "ConsumedOffsetsError",
    "InputRewindError",
    "OutboxDeliveryError",
    "OutboxError",
    "OutboxRequestError",
    "ReceiptReadError",
]


class OutboxDeliveryError(OutboxError):
    """The broker did not take an outbox request (or a service's own record) for good."""

    def __init__(self, topic: str, problem: str, *, fatal: bool, fix: str | None = None) -> None:
        super().__init__(f"producing to {topic} failed: {problem}", fix=fix)
        self.topic = topic
        self.problem = problem
        self.fatal = fatal


class ConsumedOffsetsError(OutboxError):
    """A consume-and-emit service's input offsets cannot be committed with its requests the way it asked."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"committing consumed offsets with the outbox requests: {problem}", fix=fix)
        self.problem = problem


class InputRewindError(OutboxError):
    """After an aborted transaction the input consumer could not be put back at its committed offsets.

    Its position is then unknown: going on could skip the aborted input, so the service must stop.
    """

    def __init__(self, problem: str) -> None:
        super().__init__(
            f"rewinding the input consumer after an abort failed: {problem}",
            fix="close the consumer and exit; a restarted service resumes from the committed offsets",
        )
        self.problem = problem


class ReceiptReadError(OutboxError):
    """Receipts could not be read from Kafka."""

    def __init__(self, topic: str, problem: str) -> None:
        super().__init__(
            f"reading receipts from {topic} failed: {problem}", fix="is the broker up and the topic there?"
        )
        self.topic = topic
        self.problem = problem


class BadReceiptError(ReceiptReadError):
    """A record on the receipts topic is no receipt (it does not decode); the reader stays at it."""

    def __init__(self, topic: str, partition: int, offset: int, problem: str) -> None:
        OutboxError.__init__(
            self,
            f"{topic}[{partition}]@{offset} is not a receipt: {problem}",
            fix="the reader stays at this record; pass on_bad_record= to ReceiptReader to report it (to a "
            "dead-letter store of your own) and read on",
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.problem = problem

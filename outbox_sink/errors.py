"""Errors of the outbox: emitting requests, reading receipts, running the reference receiver.

The root ``OutboxError`` and the contract's refusal ``OutboxRequestError`` live with the contract
(``ikkai.contract.outbox``), which the jobs build requests with too; they are handed on here.
"""

from __future__ import annotations

from collections.abc import Sequence

from ikkai.contract.outbox import OutboxError, OutboxRequestError

__all__ = [
    "BadReceiptError",
    "CommittedDespiteCancelError",
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


class CommittedDespiteCancelError(OutboxError):
    """An asyncio task was cancelled while its transaction committed, and the commit went through.

    ``task.cancel()``, ``asyncio.wait_for`` or ``asyncio.timeout`` asked the task to stop while
    ``commit_transaction`` ran; a commit cannot be stopped half-way, so the task waited for it,
    and it committed: every request and record of the transaction is there for a read_committed
    reader. The cancellation is answered with this error instead of ``CancelledError`` (so
    ``wait_for`` and ``asyncio.timeout`` do not turn it into a ``TimeoutError``): **do not
    retry** — a retry would emit the requests twice. ``CancelledError`` or ``TimeoutError`` out
    of a transaction means the opposite: not committed, safe to redo.
    """

    committed = True  # the transaction is committed: retrying it would emit its requests twice

    def __init__(self, topic: str, transactional_id: str) -> None:
        shown = transactional_id if len(transactional_id) <= 80 else transactional_id[:64] + "..."
        super().__init__(
            f"the transaction of {shown!a} on {topic} committed although the task was cancelled "
            "(task.cancel(), asyncio.wait_for or asyncio.timeout) while the commit ran",
            fix="do not retry: its requests are committed and a retry would emit them twice; go on as after "
            "a commit (or stop the task, if the cancellation was a shutdown)",
        )
        self.topic = topic
        self.transactional_id = transactional_id


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
    """Records on the receipts topic that are no receipt (they do not decode); the reader has read past them.

    Raised once, after the receipts read before it were handed back, for a run of bad records of
    one batch: ``partition``, ``offset`` and ``problem`` name the first, ``records`` holds (partition,
    offset, problem) of each (the first ``MAX_REPORTED``; ``more`` counts the rest). The reader
    goes on past them on every partition at the next call; with a group their offsets are committed
    once the caller comes back for more, like a returned receipt's. The bytes are not kept here:
    pass ``on_bad_record=`` to ``ReceiptReader`` to keep them.
    """

    MAX_REPORTED = 100  # (partition, offset, problem) entries an error holds; each problem is cut at 500 chars
    MAX_NAMED = 5  # places the message names

    def __init__(self, topic: str, records: Sequence[tuple[int, int, str]]) -> None:
        partition, offset, problem = records[0]
        more = max(0, len(records) - self.MAX_REPORTED)
        others = [f"{topic}[{p}]@{o}" for p, o, _ in records[1 : self.MAX_NAMED]]
        also = f" (and {len(records) - 1} more: {', '.join(others)}{', ...' if len(records) > self.MAX_NAMED else ''})"
        OutboxError.__init__(
            self,
            f"{topic}[{partition}]@{offset} is not a receipt: {problem}{also if others else ''}",
            fix="the reader has read past it and goes on with the next call (a group commits its offset once you "
            "call again); pass on_bad_record= to ReceiptReader to keep its bytes (a dead-letter store of your own)",
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.problem = problem
        self.records = tuple(records[: self.MAX_REPORTED])
        self.more = more

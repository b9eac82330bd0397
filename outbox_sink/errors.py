"""Errors of the outbox: emitting requests, reading receipts, running the reference receiver."""

from __future__ import annotations

from ikkai.errors import IkkaiError


class OutboxError(IkkaiError):
    """Base class of the outbox's errors."""


class OutboxRequestError(OutboxError):
    """An outbox request breaks the contract (schemas/outbox_request) before it is even sent."""

    def __init__(self, decision_id: str, field: str, problem: str, fix: str | None = None) -> None:
        super().__init__(f"outbox request {decision_id or '?'}: {field}: {problem}", fix=fix)
        self.decision_id = decision_id
        self.field = field
        self.problem = problem


class OutboxDeliveryError(OutboxError):
    """The broker did not take an outbox request (or a service's own record) for good."""

    def __init__(self, topic: str, problem: str, *, fatal: bool, fix: str | None = None) -> None:
        super().__init__(f"producing to {topic} failed: {problem}", fix=fix)
        self.topic = topic
        self.problem = problem
        self.fatal = fatal


class ReceiptReadError(OutboxError):
    """Receipts could not be read from Kafka."""

    def __init__(self, topic: str, problem: str) -> None:
        super().__init__(
            f"reading receipts from {topic} failed: {problem}", fix="is the broker up and the topic there?"
        )
        self.topic = topic
        self.problem = problem

"""The outbox contract: what a side-effect request and its receipt are, and how decision ids and keys are made.

Requests go to ``outbox.requests`` keyed by their business key, receipts come back on
``outbox.receipts`` keyed by ``decision_id``; both are Avro single-object encoded with the
schemas in ``schemas/outbox_request`` and ``schemas/outbox_receipt`` (ikkai.contract.codec).
Pure: no Kafka, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ikkai.contract import ids, topics
from outbox_sink.errors import OutboxRequestError

REQUESTS_TOPIC = topics.OUTBOX_REQUESTS
RECEIPTS_TOPIC = topics.OUTBOX_RECEIPTS
DLQ_TOPIC = topics.DLQ_OUTBOX
REQUEST_SCHEMA = "outbox_request"
RECEIPT_SCHEMA = "outbox_receipt"

# Headers the sink sets itself; a request that carries one is dead-lettered (outbox_sink/connector Targets.java).
RESERVED_HEADERS = frozenset({
    "idempotency-key", "authorization", "content-type", "content-length", "host", "connection",
    "expect", "upgrade", "transfer-encoding", "te", "trailer", "proxy-authorization", "cookie",
})  # fmt: skip
METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

Outcome = Literal["DELIVERED", "DEAD_LETTERED"]


def derive_decision_id(key: str, event_id: str, model_version: str) -> str:
    """sha-256 hex of (business key, input event id, model version), joined by U+001F: never random.

    ``ikkai.contract.ids.decision_id``, as the infer job derives it, so a service and the job agree
    on the id of the same decision; here the parts are checked first.

    The same event scored by the same model always yields the same id, so a replay or a
    retried batch produces the same Idempotency-Key and the receiver applies the effect once.
    """
    for name, part in (("key", key), ("event_id", event_id), ("model_version", model_version)):
        if not part or "\x1f" in part:
            raise OutboxRequestError("", name, f"{part!r} cannot be part of a decision id", fix="pass a non-empty id")
    return ids.decision_id(key, event_id, model_version)


def default_effect(target: str, path: str) -> str:
    """The effect of a request that names none: ``target + path`` (an alias has no '/', a path starts with one)."""
    return target + path


def derive_idempotency_key(decision_id: str, effect: str) -> str:
    """sha-256 hex of (decision_id, effect) joined by U+001F: the Idempotency-Key of one side effect.

    One key per side effect: real APIs and API gateways keep ONE key space for every path, so
    the hold and the notification of one decision must not share a key (the second would get
    the first's stored response and never be applied). The outbox sink computes the same
    (OutboxRequest.idempotencyKey in outbox_sink/connector); every attempt and replay of the
    effect carries the same key.
    """
    for name, part in (("decision_id", decision_id), ("effect", effect)):
        if not part or "\x1f" in part:
            raise OutboxRequestError(decision_id, name, f"{part!r} cannot be part of an idempotency key")
    return ids.idempotency_key(decision_id, effect)


@dataclass(frozen=True)
class OutboxRequest:
    """One side effect to perform: ``target`` is an alias from the sink's allow-list, never a URL.

    ``effect`` names which side effect of the decision this is (``hold-payment``,
    ``notify-customer``); None means ``target + path``. The Idempotency-Key is derived from
    (``decision_id``, effect), so each side effect of a decision has its own key, and two
    requests with the same decision and effect are one effect (the second is a repeat).
    """

    decision_id: str
    key: str
    target: str
    path: str
    body: bytes
    created_at: int  # event time in epoch milliseconds, from the decision: never the wall clock
    method: str | None = None  # None: the target alias's default method
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    model_version: str | None = None
    effect: str | None = None  # None: target + path

    @property
    def effect_name(self) -> str:
        return self.effect or default_effect(self.target, self.path)

    @property
    def idempotency_key(self) -> str:
        return derive_idempotency_key(self.decision_id, self.effect_name)

    def __post_init__(self) -> None:
        check = self._problem()
        if check:
            name, problem, fix = check
            raise OutboxRequestError(self.decision_id, name, problem, fix)

    def _problem(self) -> tuple[str, str, str | None] | None:
        if not self.decision_id:
            return "decision_id", "is empty", "use derive_decision_id(key, event_id, model_version)"
        if not self.key:
            return "key", "is empty", "the business key (payment_id, order_id) is the Kafka record key"
        if not self.target or "/" in self.target or ":" in self.target:
            return (
                "target",
                f"{self.target!r} is not an alias",
                "name an alias of the sink's allow-list, e.g. payments-api",
            )
        if not self.path.startswith("/") or self.path.startswith("//"):
            return "path", f"{self.path!r} must start with a single '/'", "it is relative to the alias's base URL"
        if self.method is not None and self.method.upper() not in METHODS:
            return "method", f"{self.method!r} is not one of {sorted(METHODS)}", None
        reserved = sorted(h for h in self.headers if h.lower() in RESERVED_HEADERS or h.lower().startswith("x-ikkai-"))
        if reserved:
            return "headers", f"{reserved} are set by the outbox sink", "drop them from the request"
        if self.created_at < 0:
            return "created_at", "must be epoch milliseconds of the decision's event time", None
        if self.effect is not None and (not self.effect or "\x1f" in self.effect or len(self.effect) > 200):
            return "effect", f"{self.effect!r} is not an effect name", "a short stable name such as hold-payment"
        return None

    def to_record(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "key": self.key,
            "target": self.target,
            "path": self.path,
            "method": self.method,
            "content_type": self.content_type,
            "body": bytes(self.body),
            "headers": dict(self.headers),
            "created_at": self.created_at,
            "model_version": self.model_version,
            "effect": self.effect,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> OutboxRequest:
        return cls(**{k: record[k] for k in cls.__dataclass_fields__ if k in record})


@dataclass(frozen=True)
class Receipt:
    """The final outcome of one side effect, as the outbox sink wrote it to ``outbox.receipts``.

    A reader identifies the effect by ``(decision_id, effect_id)``. Receipts are written at least
    once, so one effect may have several; when they disagree, DELIVERED wins (``prevailing``):
    the effect happened, whatever an earlier attempt concluded.
    """

    decision_id: str
    key: str
    target: str
    outcome: Outcome
    status_code: int | None
    attempts: int
    first_attempt_at: int
    last_attempt_at: int
    response_digest: str | None
    reason: str | None
    effect: str | None = None  # None in receipts written before outbox_receipt v2
    idempotency_key: str | None = None

    @property
    def delivered(self) -> bool:
        return self.outcome == "DELIVERED"

    @property
    def effect_id(self) -> str:
        """Which effect of its decision this receipt is for: its effect, or (older receipts) its target."""
        return self.effect or self.target

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Receipt:
        return cls(**{k: record[k] for k in cls.__dataclass_fields__ if k in record})

    def to_record(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def prevailing(current: Receipt, later: Receipt) -> Receipt:
    """Which of two receipts of one effect a reader should believe: DELIVERED wins, else the first.

    A DEAD_LETTERED receipt (retry budget exhausted, say) followed by a DELIVERED one (the DLQ
    record replayed, or a redelivery answered with the stored response) means the effect
    happened; a DEAD_LETTERED after a DELIVERED cannot undo it. Between equal outcomes the first
    is kept (a repeat carries the same facts).
    """
    if later.delivered and not current.delivered:
        return later
    return current

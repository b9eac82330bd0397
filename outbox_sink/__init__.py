"""The outbox: how services ask for side effects, and the sink that performs each once.

Services emit ``OutboxRequest`` records to ``outbox.requests`` with ``OutboxEmitter``; the
outbox sink (a Kafka Connect connector, Java, in ``connector/``) delivers each to an
allow-listed HTTP target with one ``Idempotency-Key`` per side effect (``derive_idempotency_key``
of decision_id and effect) and writes a ``Receipt`` to ``outbox.receipts``, read back with
``ReceiptReader`` (DELIVERED wins when two receipts of one effect disagree: ``prevailing``).
``ReferenceReceiver`` stands in for the payments and notification APIs in the demo and the tests.
"""

from typing import TYPE_CHECKING, Any

from outbox_sink.connector_config import TargetAlias, create_outbox_topics, outbox_sink_config
from outbox_sink.contract import (
    DLQ_TOPIC,
    RECEIPTS_TOPIC,
    REQUESTS_TOPIC,
    OutboxRequest,
    Receipt,
    derive_decision_id,
    derive_idempotency_key,
    prevailing,
)
from outbox_sink.emitter import OutboxEmitter, TransactionalConsumer, rewind
from outbox_sink.errors import (
    ConsumedOffsetsError,
    InputRewindError,
    OutboxDeliveryError,
    OutboxError,
    OutboxRequestError,
    ReceiptReadError,
)
from outbox_sink.receipts import ReceiptReader, decode_receipt

if TYPE_CHECKING:
    from outbox_sink.receiver import ReferenceReceiver

__all__ = [
    "DLQ_TOPIC",
    "RECEIPTS_TOPIC",
    "REQUESTS_TOPIC",
    "ConsumedOffsetsError",
    "InputRewindError",
    "OutboxDeliveryError",
    "OutboxEmitter",
    "OutboxError",
    "OutboxRequest",
    "OutboxRequestError",
    "Receipt",
    "ReceiptReadError",
    "ReceiptReader",
    "ReferenceReceiver",
    "TargetAlias",
    "TransactionalConsumer",
    "create_outbox_topics",
    "decode_receipt",
    "derive_decision_id",
    "derive_idempotency_key",
    "outbox_sink_config",
    "prevailing",
    "rewind",
]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `python -m outbox_sink.receiver` does not find its module already imported.
    if name == "ReferenceReceiver":
        from outbox_sink.receiver import ReferenceReceiver

        return ReferenceReceiver
    raise AttributeError(f"module 'outbox_sink' has no attribute {name!r}")

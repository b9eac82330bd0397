"""The outbox: how services ask for side effects, and the sink that performs each once.

Services emit ``OutboxRequest`` records to ``outbox.requests`` with ``OutboxEmitter`` (asyncio
services with ``AsyncOutboxEmitter``); the outbox sink (a Kafka Connect connector, Java, in
``connector/``) delivers each to an allow-listed HTTP target with one ``Idempotency-Key`` per side
effect (``derive_idempotency_key`` of decision_id and effect) and writes a ``Receipt`` to
``outbox.receipts``, read back incrementally with ``ReceiptReader`` (DELIVERED wins when two
receipts of one effect disagree: ``prevailing``). This package, the contract and the codec are
the light client of a plain ``pip install ikkai``: no Spark, no pandas, no scikit-learn.
The sink's connector config is the ``outbox-sink`` bundle (connectors/bundles/outbox-sink), nowhere else.
(The demo's stand-in for the payments and notification APIs is ``demo.receiver``, not part of this package.)
"""

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.outbox import (
    EffectRef,
    OutboxRequest,
    Receipt,
    derive_decision_id,
    derive_idempotency_key,
    prevailing,
)
from ikkai.contract.topics import DLQ_OUTBOX as DLQ_TOPIC
from ikkai.contract.topics import OUTBOX_RECEIPTS as RECEIPTS_TOPIC
from ikkai.contract.topics import OUTBOX_REQUESTS as REQUESTS_TOPIC
from outbox_sink.async_emitter import AsyncOutboxEmitter
from outbox_sink.emitter import OutboxEmitter, TransactionalConsumer, rewind
from outbox_sink.errors import (
    BadReceiptError,
    CommittedDespiteCancelError,
    ConsumedOffsetsError,
    InputRewindError,
    OutboxDeliveryError,
    OutboxError,
    OutboxRequestError,
    ReceiptReadError,
)
from outbox_sink.receipts import BadReceipt, ReceiptReader, decode_receipt
from outbox_sink.topics import create_outbox_topics

__all__ = [
    "DLQ_TOPIC",
    "RECEIPTS_TOPIC",
    "REQUESTS_TOPIC",
    "AsyncOutboxEmitter",
    "BadReceipt",
    "BadReceiptError",
    "CommittedDespiteCancelError",
    "ConsumedOffsetsError",
    "EffectRef",
    "InputRewindError",
    "KafkaContext",
    "OutboxDeliveryError",
    "OutboxEmitter",
    "OutboxError",
    "OutboxRequest",
    "OutboxRequestError",
    "Receipt",
    "ReceiptReadError",
    "ReceiptReader",
    "TransactionalConsumer",
    "create_outbox_topics",
    "decode_receipt",
    "derive_decision_id",
    "derive_idempotency_key",
    "prevailing",
    "rewind",
]

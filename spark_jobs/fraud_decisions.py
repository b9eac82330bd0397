"""From payment events to fraud decisions and outbox requests (pure: pandas in, pandas out).

``decide`` takes Kafka source rows (key, value, topic, partition, offset) of ``events.payments``
and returns the sink's output rows: one ``decisions.fraud`` record per event, plus the outbox
requests its action asks for (``hold`` → hold the payment at payments-api and notify the
customer; ``review`` → put the payment on the payments-api review queue; ``approve`` → none).
A value that does not decode becomes a DeadLetter on the DLQ topic instead of stopping the job.

Everything is a function of the input bytes, the model artifact and the feature snapshots:
``decision_id`` = sha-256 of (payment_id, event_id, model_version), timestamps inside the
records are event times, JSON bodies are canonical. The same input always gives the same keys
and values (the Kafka record timestamp is the write time, see ``WRITE_TIME``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ikkai.contract import topics
from ikkai.contract.codec import RecordCodec, SchemaError
from ikkai.contract.ids import decision_id
from spark_jobs.model.fraud_model import FEATURES, FraudModel, as_of_snapshots, feature_frame

OUTPUT_SCHEMA = (
    "topic string, key binary, value binary, timestamp long, input_partition int, input_offset long, seq int, "
    "headers map<string,string>"  # a dead letter's stage, error class and reason as Kafka headers; null otherwise
)
ORDER_BY = ("input_partition", "input_offset", "seq")
# Kafka record timestamps stay the write time (CreateTime), not the event time: retention is
# judged by record timestamps, so replaying last month's events with event-time timestamps
# would have the broker delete the output right after writing it. Keys and values are the
# deterministic content; the event time travels inside the value.
WRITE_TIME = None


@dataclass(frozen=True)
class Topics:
    decisions: str = topics.DECISIONS_FRAUD
    outbox: str = topics.OUTBOX_REQUESTS
    dlq: str = topics.DLQ_INFER


def _body(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def outbox_requests(decision: dict[str, Any], customer_id: str) -> list[dict[str, Any]]:
    """The side effects a decision asks for, as outbox_request records (none for approve)."""
    common = {
        "decision_id": decision["decision_id"], "key": decision["payment_id"], "method": "POST",
        "content_type": "application/json", "headers": {}, "created_at": decision["event_time"],
        "model_version": decision["model_version"],
    }  # fmt: skip
    payment = decision["payment_id"]
    # Each side effect names itself: the sink keys it by sha-256 of (decision_id, effect), so the
    # hold and the notification of one decision never share an Idempotency-Key.
    if decision["action"] == "hold":
        return [
            {**common, "target": "payments-api", "path": f"/payments/{payment}/hold", "effect": "hold-payment",
             "body": _body({"payment_id": payment, "decision_id": decision["decision_id"], "reason": "fraud-score",
                            "score": decision["score"]})},
            {**common, "target": "notifications-api", "path": "/notifications", "effect": "notify-customer",
             "body": _body({"customer_id": customer_id, "template": "payment-held", "payment_id": payment})},
        ]  # fmt: skip
    if decision["action"] == "review":
        return [{**common, "target": "payments-api", "path": f"/payments/{payment}/review", "effect": "review-payment",
                 "body": _body({"payment_id": payment, "decision_id": decision["decision_id"]})}]  # fmt: skip
    return []


def _dead_letter(row: Any, error: SchemaError, codec: RecordCodec, topics: Topics) -> tuple[Any, ...]:
    record = {
        "stage": "infer", "source_topic": row.topic, "source_partition": int(row.partition),
        "source_offset": int(row.offset), "key": None if row.key is None else bytes(row.key),
        "value": None if row.value is None else bytes(row.value), "reason": str(error),
        "error_class": type(error).__name__, "source_timestamp": 0,
        "headers": {"ikkai.dlq.stage": "infer", "ikkai.dlq.error_class": type(error).__name__,
                    "ikkai.dlq.reason": str(error)},
    }  # fmt: skip
    key = bytes(row.key) if row.key is not None else f"{row.topic}-{row.partition}-{row.offset}".encode()
    return (topics.dlq, key, codec.encode("dead_letter", record), None, int(row.partition), int(row.offset), 0,
            record["headers"])  # fmt: skip


def decide(
    rows: pd.DataFrame, model: FraudModel, snapshots: pd.DataFrame, codec: RecordCodec, topics: Topics
) -> pd.DataFrame:
    """Output rows (``OUTPUT_SCHEMA``) for one chunk of Kafka source rows."""
    out: list[tuple[Any, ...]] = []
    payments: list[dict[str, Any]] = []
    sources: list[Any] = []
    for row in rows.itertuples(index=False):
        try:
            payments.append(codec.decode("payment_event", bytes(row.value)))
            sources.append(row)
        except SchemaError as exc:
            out.append(_dead_letter(row, exc, codec, topics))
    if payments:
        frame = pd.DataFrame(payments)
        joined = as_of_snapshots(frame, snapshots)
        features = feature_frame(joined)
        scores = model.score(features)
        actions = model.actions(scores)
        as_of = joined["features_as_of"]
        for i, (payment, source) in enumerate(zip(payments, sources, strict=True)):
            decision = {
                "decision_id": decision_id(payment["payment_id"], payment["event_id"], model.version),
                "payment_id": payment["payment_id"],
                "event_id": payment["event_id"],
                "model_version": model.version,
                "score": float(scores[i]),
                "action": str(actions[i]),
                "features": {name: float(features[name].iat[i]) for name in FEATURES},
                "features_as_of": None if pd.isna(as_of.iat[i]) else int(as_of.iat[i]),
                "event_time": payment["event_time"],
                "input_topic": source.topic,
                "input_partition": int(source.partition),
                "input_offset": int(source.offset),
            }
            key = payment["payment_id"].encode()
            where = (int(source.partition), int(source.offset))
            out.append((topics.decisions, key, codec.encode("fraud_decision", decision), WRITE_TIME, *where, 0, None))
            for seq, request in enumerate(outbox_requests(decision, payment["customer_id"]), start=1):
                encoded = codec.encode("outbox_request", request)
                out.append((topics.outbox, key, encoded, WRITE_TIME, *where, seq, None))
    columns = ["topic", "key", "value", "timestamp", "input_partition", "input_offset", "seq", "headers"]
    frame_out = pd.DataFrame(out, columns=columns)
    return frame_out.astype(
        {"timestamp": "Int64", "input_partition": np.int32, "input_offset": np.int64, "seq": np.int32}
    )


def decide_batches(
    chunks: Iterator[pd.DataFrame], model: FraudModel, snapshots: pd.DataFrame, codec: RecordCodec, topics: Topics
) -> Iterator[pd.DataFrame]:
    """The ``mapInPandas`` function: ``decide`` over each Arrow chunk."""
    for chunk in chunks:
        yield decide(chunk, model, snapshots, codec, topics)

"""Turning what the topics and the receiver hold into ``Facts``: reads (read_committed) and decoding.

The receiver's applied side effects come from its SQLite file (what it *did*), the HTTP
requests it answered from its control endpoint (how often the sink *asked*).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from demo.children import get_json
from demo.facts import LIVE_TOPICS, Decision, ReceiptSeen, SideEffectRequest
from demo.measures import TopicRecord
from demo.topics import read_topic
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.outbox import OutboxRequest
from ikkai.contract.topics import DECISIONS_FRAUD, DLQ_ENRICH, EVENTS_PAYMENTS, OUTBOX_RECEIPTS, OUTBOX_REQUESTS
from outbox_sink.receipts import decode_receipt


def api_of(path: str) -> str:
    """The receiver's key space for a request path: its first segment (``/payments/p-1/hold`` → payments)."""
    return path.lstrip("/").split("/", 1)[0].split("?", 1)[0]


def receipt_identity(value: bytes) -> tuple[str, str]:
    """Which side effect a receipt answers: (decision_id, effect)."""
    receipt = decode_receipt(value)
    return receipt.decision_id, receipt.effect_id


def read_topics(cluster: KafkaContext, topics: Iterable[str]) -> dict[str, list[TopicRecord]]:
    """Every topic read at once, one consumer each: a read mostly waits (assignment, fetches, each partition's end),
    so one after the other the demo's seven live topics took 7-8 s on the development machine."""
    names = list(topics)
    with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix="demo-read") as pool:
        return dict(zip(names, pool.map(lambda topic: read_topic(cluster, topic), names), strict=True))


def read_live(cluster: KafkaContext) -> dict[str, list[TopicRecord]]:
    return read_topics(cluster, LIVE_TOPICS)


def _values(records: Iterable[TopicRecord]) -> Iterable[tuple[TopicRecord, bytes]]:
    return ((r, r.value) for r in records if r.value is not None)


def decoded(topics: Mapping[str, list[TopicRecord]]) -> dict[str, Any]:
    """event_ids, dead_letter_reasons, decisions, requests and receipts from the live topics, and the decoded events
    and decisions (``contents``, for their content digests)."""
    codec = default_codec()
    decisions, decided = [], []
    for record, value in _values(topics[DECISIONS_FRAUD]):
        d = codec.decode("fraud_decision", value)
        decided.append(d)
        decisions.append(Decision(d["decision_id"], d["payment_id"], d["event_id"], d["action"], record.timestamp))
    requests = []
    for _, value in _values(topics[OUTBOX_REQUESTS]):
        o = OutboxRequest.from_record(codec.decode("outbox_request", value))
        requests.append(SideEffectRequest(o.decision_id, o.target, api_of(o.path), o.effect_name, o.idempotency_key))
    receipts = []
    for record, value in _values(topics[OUTBOX_RECEIPTS]):
        receipt = decode_receipt(value, codec)
        receipts.append(
            ReceiptSeen(receipt.decision_id, receipt.target, receipt.outcome, record.timestamp, receipt.effect_id)
        )
    events = [codec.decode("payment_event", v) for _, v in _values(topics[EVENTS_PAYMENTS])]
    return {
        "event_ids": [event["event_id"] for event in events],
        "dead_letter_reasons": [codec.decode("dead_letter", v)["error_class"] for _, v in _values(topics[DLQ_ENRICH])],
        "decisions": decisions,
        "requests": requests,
        "receipts": receipts,
        "contents": {
            EVENTS_PAYMENTS: events,
            DECISIONS_FRAUD: decided,
        },
    }


def receiver_applied(db: Path) -> list[tuple[str, str]]:
    """(api, idempotency key) of every side effect the receiver applied, from its database."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute("SELECT api, idempotency_key FROM applied ORDER BY seq").fetchall()
    finally:
        connection.close()
    return [(str(api), str(key)) for api, key in rows]


def receiver_deliveries(url: str) -> list[tuple[str, str, bool]]:
    """(api, idempotency key, answered from the stored response) of every API request the receiver got."""
    rows = get_json(f"{url}/_ikkai/deliveries")
    assert isinstance(rows, list)
    return [(api_of(r["path"]), r["idempotency_key"] or "", bool(r["replayed"])) for r in rows]

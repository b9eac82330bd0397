"""Reading receipts back from ``outbox.receipts``: what happened to each request, event-driven.

The sink writes a receipt per final outcome, at least once: after a Connect task restart a
request may be delivered again (same Idempotency-Key) and receipted again. The reader
therefore keeps the first receipt per (``decision_id``, ``target``) — one decision may ask one
side effect of each of several targets — and counts the repeats; a repeat carries the same
decision_id, outcome and (when the receiver replays its stored answer) the same status and
response digest.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError

from outbox_sink.contract import RECEIPT_SCHEMA, RECEIPTS_TOPIC, Receipt
from outbox_sink.errors import ReceiptReadError
from spark_jobs.serialization import RecordCodec, default_codec


def decode_receipt(value: bytes, codec: RecordCodec | None = None) -> Receipt:
    return Receipt.from_record((codec or default_codec()).decode(RECEIPT_SCHEMA, value))


class ReceiptReader:
    """A read_committed consumer of receipts. Without ``group_id`` it reads from the start and commits nothing."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic: str = RECEIPTS_TOPIC,
        group_id: str | None = None,
        codec: RecordCodec | None = None,
    ) -> None:
        self.topic = topic
        self._codec = codec or default_codec()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id or f"ikkai.receipts.{uuid.uuid4().hex[:12]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": group_id is not None,
            "isolation.level": "read_committed",
        })  # fmt: skip
        self._consumer.subscribe([topic])
        self.seen: dict[tuple[str, str], Receipt] = {}  # first receipt per (decision_id, target)
        self.duplicates = 0  # receipts already seen (redeliveries after a restart)

    def poll(self, timeout_s: float = 1.0) -> list[Receipt]:
        """Receipts that arrived within ``timeout_s``; only the first per decision_id is returned."""
        fresh: list[Receipt] = []
        for message in self._consumer.consume(500, timeout_s):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise ReceiptReadError(self.topic, error.str())
                continue
            value = message.value()
            if value is None:
                continue
            receipt = decode_receipt(value, self._codec)
            if (receipt.decision_id, receipt.target) in self.seen:
                self.duplicates += 1
                continue
            self.seen[receipt.decision_id, receipt.target] = receipt
            fresh.append(receipt)
        return fresh

    def wait_for(self, decision_ids: Iterable[str], timeout_s: float) -> dict[str, Receipt]:
        """Poll until every id has a receipt or ``timeout_s`` passed; the first receipt of each id found."""
        wanted = set(decision_ids)
        deadline = time.monotonic() + timeout_s
        while not wanted <= self._decisions() and time.monotonic() < deadline:
            self.poll(0.5)
        found: dict[str, Receipt] = {}
        for (decision_id, _), receipt in self.seen.items():
            if decision_id in wanted:
                found.setdefault(decision_id, receipt)
        return found

    def wait_for_targets(self, wanted: Iterable[tuple[str, str]], timeout_s: float) -> dict[tuple[str, str], Receipt]:
        """Like ``wait_for`` for decisions with several side effects: by (decision_id, target)."""
        pairs = set(wanted)
        deadline = time.monotonic() + timeout_s
        while not pairs <= self.seen.keys() and time.monotonic() < deadline:
            self.poll(0.5)
        return {p: self.seen[p] for p in pairs if p in self.seen}

    def _decisions(self) -> set[str]:
        return {decision_id for decision_id, _ in self.seen}

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> ReceiptReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Reading receipts back from ``outbox.receipts``: what happened to each side effect, event-driven.

The sink writes a receipt per final outcome, at least once: after a Connect task restart a
request may be delivered again (same Idempotency-Key) and receipted again, and a dead-lettered
request replayed from the DLQ is receipted again. The reader keeps one receipt per effect,
(``decision_id``, ``effect_id``) — one decision may ask for several side effects — and when two
disagree believes ``prevailing``: DELIVERED wins (the effect happened), otherwise the first.
Repeats are counted in ``duplicates``, corrections (a DEAD_LETTERED replaced by a DELIVERED) in
``corrected``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError

from ikkai.contract import kafka
from ikkai.contract.codec import RecordCodec, default_codec
from outbox_sink.contract import RECEIPT_SCHEMA, RECEIPTS_TOPIC, Receipt, prevailing
from outbox_sink.errors import ReceiptReadError


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
        group = group_id or f"ikkai.receipts.{uuid.uuid4().hex[:12]}"
        settings = {"auto.offset.reset": "earliest", "enable.auto.commit": group_id is not None}
        self._consumer = Consumer(kafka.consumer_config(bootstrap_servers, group, **settings))
        self._consumer.subscribe([topic])
        self.seen: dict[tuple[str, str], Receipt] = {}  # the prevailing receipt per (decision_id, effect_id)
        self.duplicates = 0  # receipts that changed nothing (redeliveries after a restart)
        self.corrected = 0  # DEAD_LETTERED receipts replaced by a later DELIVERED one

    def poll(self, timeout_s: float = 1.0) -> list[Receipt]:
        """Receipts that arrived within ``timeout_s`` and are new or change the verdict on their effect."""
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
            effect = (receipt.decision_id, receipt.effect_id)
            current = self.seen.get(effect)
            if current is not None:
                if prevailing(current, receipt) is current:
                    self.duplicates += 1
                    continue
                self.corrected += 1
            self.seen[effect] = receipt
            fresh.append(receipt)
        return fresh

    def wait_for(self, decision_ids: Iterable[str], timeout_s: float) -> dict[str, Receipt]:
        """Poll until every id has a receipt or ``timeout_s`` passed; one receipt of each id found."""
        wanted = set(decision_ids)
        deadline = time.monotonic() + timeout_s
        while not wanted <= self._decisions() and time.monotonic() < deadline:
            self.poll(0.5)
        found: dict[str, Receipt] = {}
        for (decision_id, _), receipt in self.seen.items():
            if decision_id in wanted:
                found.setdefault(decision_id, receipt)
        return found

    def wait_for_effects(self, wanted: Iterable[tuple[str, str]], timeout_s: float) -> dict[tuple[str, str], Receipt]:
        """Like ``wait_for`` for decisions with several side effects: by (decision_id, effect_id)."""
        pairs = set(wanted)
        deadline = time.monotonic() + timeout_s
        while not pairs <= self.seen.keys() and time.monotonic() < deadline:
            self.poll(0.5)
        return {p: self.seen[p] for p in pairs if p in self.seen}

    def wait_for_targets(self, wanted: Iterable[tuple[str, str]], timeout_s: float) -> dict[tuple[str, str], Receipt]:
        """By (decision_id, target), for decisions asking at most one side effect of each target."""
        pairs = set(wanted)
        deadline = time.monotonic() + timeout_s
        while not pairs <= self._by_target().keys() and time.monotonic() < deadline:
            self.poll(0.5)
        return {p: r for p, r in self._by_target().items() if p in pairs}

    def _by_target(self) -> dict[tuple[str, str], Receipt]:
        return {(r.decision_id, r.target): r for r in self.seen.values()}

    def _decisions(self) -> set[str]:
        return {decision_id for decision_id, _ in self.seen}

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> ReceiptReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Bounded reads of Kafka: end offsets in one batched request, and the last records of partitions.

Used by the health view's readers (``deploy.eos_view``: ``consumer_lag``, ``dead_letter_reasons``, ``reconciliation``,
``event_decisions``) and by the record of applies (``deploy.applies``), so it stands below both. They never read a
topic's history: they ask for offsets in one batched ListOffsets request per kind, and read a window of at most a
few hundred records before each partition's read_committed end (the last stable offset, LSO), with a
read_committed consumer that is assigned its partitions (no group is joined, nothing committed). Every read has a
deadline and a byte budget: what did not arrive within them is reported as not read to its end, never waited for.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partition_ends import records_to_end

log = logging.getLogger("ikkai.serve.eos_health")  # librdkafka's own complaints (a broker down) go here
Where = tuple[str, int]  # (topic, partition)
BYTE_BUDGET = 32 * 1024 * 1024  # keys and values read per window; a dead letter alone may be 512 KiB


class Deadline:
    """One budget of seconds for several reads: each takes what is left of it."""

    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.1, self.until - time.monotonic())


@dataclass(frozen=True)
class Record:
    """What the health readers keep of a record: where it is, when it was written, its key, value and headers."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` as text (invalid UTF-8 replaced), or None."""
        found = [v for n, v in self.headers if n == name]
        return None if not found or found[-1] is None else found[-1].decode("utf-8", "replace")


class _Late(Exception):
    def __init__(self, pending: set[Where]) -> None:
        super().__init__(f"{len(pending)} partition(s) not read to their end")
        self.pending = pending


def offsets(admin: AdminClient, partitions: list[Where], spec: OffsetSpec, deadline: Deadline,
            isolation: IsolationLevel = IsolationLevel.READ_COMMITTED) -> dict[Where, int]:  # fmt: skip
    """One batched ListOffsets request: ``spec`` (earliest, latest, for a timestamp) of each partition."""
    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions}, isolation_level=isolation, request_timeout=deadline.left()
    )
    return {(tp.topic, tp.partition): int(f.result(timeout=deadline.left()).offset) for tp, f in futures.items()}


def last_records(
    kafka: KafkaContext, windows: Mapping[Where, tuple[int, int]], deadline: Deadline, byte_budget: int = BYTE_BUDGET
) -> tuple[list[Record], set[Where]]:
    """The committed records of each partition from ``windows[partition][0]`` to its end (``[1]``, the LSO the
    window was measured at; records appended since are left out), and the partitions not read that far within
    the deadline or the byte budget."""
    wanted = {w: (start, end) for w, (start, end) in windows.items() if end > start}
    if not wanted:
        return [], set()
    settings: dict[str, Any] = {
        "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "latest",
        "fetch.wait.max.ms": 10, "queued.max.messages.kbytes": 16 * 1024, "logger": log,
    }  # fmt: skip
    consumer = Consumer(kafka.consumer_config(f"_ikkai.health.{uuid.uuid4().hex}", **settings))
    found: list[Record] = []
    spent = 0
    try:
        for message in records_to_end(
            consumer, wanted, deadline.left(), starts={w: s for w, (s, _) in wanted.items()},
            failed=lambda _, error: KafkaException(error), late=_Late,
        ):  # fmt: skip
            where = (message.topic(), message.partition())
            if message.offset() >= wanted[where][1]:
                continue
            key, value = message.key(), message.value()
            spent += len(key or b"") + len(value or b"")
            headers = tuple((n, v) for n, v in (message.headers() or []))
            found.append(Record(*where, message.offset(), message.timestamp()[1], key, value, headers))
            if spent > byte_budget:
                read_to = {(r.topic, r.partition): r.offset for r in found}
                return found, {w for w, (_, end) in wanted.items() if read_to.get(w, -1) + 1 < end}
        return found, set()
    except _Late as late:
        return found, late.pending
    finally:
        consumer.close()


def window_coverage(records: Sequence[Record], cut: Iterable[Where]) -> int:
    """From which timestamp a bounded read covers every partition: the latest first-read timestamp of a
    partition whose window was cut (0 when none was). Records older than it may have a match before the
    window. Pure."""
    first: dict[Where, int] = {}
    for r in records:
        where = (r.topic, r.partition)
        first[where] = min(first.get(where, r.timestamp_ms), r.timestamp_ms)
    return max((first.get(w, 0) for w in cut), default=0)

"""What the demo measures, as pure functions: topic digests, percentiles and stage latencies.

A topic's digest is sha-256 over its partitions in ascending order and, within each, its
records in offset order: partition number, then each record's key and value, each
length-prefixed (8 bytes, big-endian; -1 for a null). Kafka timestamps are write times and
stay out, so two topics with the same content per partition have the same digest whenever
they were written.

A topic's content digest is what stays the same from one run of a seed to the next: sha-256 over
the decoded records as canonical JSON (keys sorted), without the fields a run decides by itself
(``RUN_DEPENDENT``: when the ingest record was written, where in the input the job read an event),
in the order of the topic's record identity (``IDENTITY``: event_id, decision_id). Neither
partitions nor offsets enter it, so a run whose chaos aborted transactions (which take offsets)
has the content digest of a run without chaos when it holds the same records.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ikkai.contract.topics import DECISIONS_FRAUD, EVENTS_PAYMENTS

PERCENTILES = (50, 95, 99)

# The topics with a content digest: the field that names each record, and the fields a run sets by itself.
IDENTITY: Mapping[str, str] = {EVENTS_PAYMENTS: "event_id", DECISIONS_FRAUD: "decision_id"}
RUN_DEPENDENT: Mapping[str, frozenset[str]] = {
    # The ingest record's Kafka timestamp: when the connector wrote the raw line.
    EVENTS_PAYMENTS: frozenset({"ingested_at"}),
    # Where the event sat in events.payments: its offset moves with what enrich's transactions aborted, and the
    # partition would with another partition count.
    DECISIONS_FRAUD: frozenset({"input_partition", "input_offset"}),
}


@dataclass(frozen=True)
class TopicRecord:
    """One record as a read_committed consumer saw it."""

    partition: int
    offset: int
    timestamp: int  # epoch ms, the broker's CreateTime: when it was written
    key: bytes | None
    value: bytes | None


def _framed(data: bytes | None) -> bytes:
    if data is None:
        return (-1).to_bytes(8, "big", signed=True)
    return len(data).to_bytes(8, "big", signed=True) + data


def topic_digest(records: Iterable[TopicRecord]) -> str:
    """sha-256 hex of the topic's content per partition in offset order (arrival order does not matter)."""
    by_partition: dict[int, list[TopicRecord]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record)
    digest = hashlib.sha256()
    for partition in sorted(by_partition):
        digest.update(b"partition" + partition.to_bytes(4, "big"))
        for record in sorted(by_partition[partition], key=lambda r: r.offset):
            digest.update(_framed(record.key) + _framed(record.value))
    return digest.hexdigest()


def content_digest(topic: str, records: Iterable[Mapping[str, Any]]) -> str:
    """sha-256 hex of ``topic``'s decoded records without its ``RUN_DEPENDENT`` fields, as canonical JSON lines in
    the order of their ``IDENTITY`` field (then of the line itself): the same for two runs of one seed."""
    leave_out = RUN_DEPENDENT[topic]
    lines = sorted(
        (str(record[IDENTITY[topic]]), json.dumps(
            {k: v for k, v in record.items() if k not in leave_out},
            sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        ))
        for record in records
    )  # fmt: skip
    digest = hashlib.sha256()
    for _, line in lines:
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values_ms: Sequence[float]) -> dict[str, float | int | None]:
    """count, p50, p95, p99 and max in ms (None when nothing was measured)."""
    summary: dict[str, float | int | None] = {"count": len(values_ms)}
    for p in PERCENTILES:
        summary[f"p{p}"] = percentile(values_ms, p) if values_ms else None
    summary["max"] = max(values_ms) if values_ms else None
    return summary


def first_seen(records: Iterable[TopicRecord]) -> dict[bytes, int]:
    """The earliest timestamp per key (a key seen twice, e.g. a duplicate, counts from its first arrival)."""
    seen: dict[bytes, int] = {}
    for record in records:
        if record.key is not None and (record.key not in seen or record.timestamp < seen[record.key]):
            seen[record.key] = record.timestamp
    return seen


def latencies(starts: Mapping[str, int], ends: Iterable[tuple[str, int]]) -> list[float]:
    """end - start in ms for each (id, end) whose id has a start; ids without one are skipped."""
    return [float(end - starts[key]) for key, end in ends if key in starts]

"""Read partitions to their end now: every committed record up to where each partition ends when it is reached.

The consumer reads ``read_committed`` (``kafka.consumer_config``) with ``enable.partition.eof``, so a
partition's end is its last stable offset (LSO): a record behind another writer's still open
transaction is not read, and the read does not wait for that transaction. A reader that must see
every committed record of a partition whose only writer it has fenced checks the high watermark
instead (``spark_jobs.sink.commit_markers.read_marker``). It lives in the contract layer because both the
jobs (markers, the decision comparison) and the control plane (the page's health view) read this way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

OFFSET_BEGINNING = -2


def records_to_end(
    consumer: Consumer,
    partitions: Iterable[tuple[str, int]],
    deadline_s: float,
    *,
    failed: Callable[[str, KafkaError], Exception],
    late: Callable[[set[tuple[str, int]]], Exception],
    starts: Mapping[tuple[str, int], int] | None = None,
) -> Iterator[Any]:
    """The records of ``partitions`` (topic, partition), from the beginning (or from ``starts[partition]``),
    until each has reported its end.

    A partition that has reported its end still yields records appended since, while another is
    read on. A read error raises ``failed(topic, error)``; partitions not at their end when
    ``deadline_s`` has passed raise ``late(pending)``. No partition at all: nothing is read.
    """
    pending = set(partitions)
    starts = starts or {}
    consumer.assign([TopicPartition(t, p, starts.get((t, p), OFFSET_BEGINNING)) for t, p in sorted(pending)])
    give_up_at = time.monotonic() + deadline_s
    while pending and time.monotonic() < give_up_at:
        message: Any = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise failed(message.topic() or "?", error)
            pending.discard((message.topic(), message.partition()))
            continue
        yield message
    if pending:
        raise late(pending)

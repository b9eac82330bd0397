"""Test helpers for the jobs: the headers read_committed consumers see."""

from __future__ import annotations

import time

from confluent_kafka import Consumer

from stack.kit.topic_io import unique


def headers_by_value(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> dict[bytes, dict[str, bytes]]:
    """The Kafka headers of each committed record of ``topic``, by its value."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("test.headers"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe([topic])
    seen: dict[bytes, dict[str, bytes]] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < expect and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                seen[message.value()] = dict(message.headers() or [])
    finally:
        consumer.close()
    return seen

"""Reading partitions to their end: records until every partition reported its end, errors and deadlines raised."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from ikkai.contract import partition_ends
from ikkai.contract.partition_ends import records_to_end


class _Message:
    def __init__(self, topic: str | None, partition: int, value: bytes = b"", code: int | None = None) -> None:
        self._topic, self._partition, self._value = topic, partition, value
        self._error = None if code is None else KafkaError(code, "broker says no")

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def value(self) -> bytes:
        return self._value

    def error(self) -> KafkaError | None:
        return self._error


class _Consumer:
    """Hands out the scripted poll results in order, then nothing (None) forever."""

    def __init__(self, script: list[_Message | None]) -> None:
        self.script: list[_Message | None] = list(script)
        self.assigned: list[tuple[str, int, int]] = []

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def poll(self, _timeout: float) -> _Message | None:
        return self.script.pop(0) if self.script else None


def _eof(topic: str, partition: int) -> _Message:
    return _Message(topic, partition, code=KafkaError._PARTITION_EOF)


def _refused(kind: str) -> Any:
    return lambda *args: RuntimeError(f"{kind}: {args}")


def test_every_record_until_each_partition_reported_its_end_even_after_one_did() -> None:
    consumer = _Consumer([
        _Message("t", 1, b"a"), None, _eof("t", 1), _Message("t", 1, b"b"), _Message("t", 0, b"c"), _eof("t", 0),
        _Message("t", 0, b"never read: every partition is at its end"),
    ])  # fmt: skip
    read = records_to_end(consumer, [("t", 1), ("t", 0)], 5, failed=_refused("failed"), late=_refused("late"))  # type: ignore[arg-type]
    assert [m.value() for m in read] == [b"a", b"b", b"c"]
    assert consumer.assigned == [("t", 0, -2), ("t", 1, -2)]  # from the beginning


def test_a_read_error_raises_what_the_reader_makes_of_it() -> None:
    consumer = _Consumer([_Message(None, -1, code=KafkaError._ALL_BROKERS_DOWN)])
    with pytest.raises(RuntimeError, match="failed: \\('\\?'"):
        list(records_to_end(consumer, [("t", 0)], 5, failed=_refused("failed"), late=_refused("late")))  # type: ignore[arg-type]


def test_partitions_not_at_their_end_by_the_deadline_raise_with_what_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(range(100))
    monkeypatch.setattr(partition_ends, "time", SimpleNamespace(monotonic=lambda: float(next(clock))))
    consumer = _Consumer([_eof("t", 0)])
    with pytest.raises(RuntimeError, match="late: \\(\\{\\('t', 1\\)\\},\\)"):
        list(records_to_end(consumer, [("t", 0), ("t", 1)], 3, failed=_refused("failed"), late=_refused("late")))  # type: ignore[arg-type]


def test_no_partition_reads_nothing() -> None:
    consumer = _Consumer([_Message("t", 0, b"x")])
    assert list(records_to_end(consumer, [], 5, failed=_refused("failed"), late=_refused("late"))) == []  # type: ignore[arg-type]

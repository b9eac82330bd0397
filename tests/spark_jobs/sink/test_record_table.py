"""A partition's records handed to the executor writer as Arrow: the same records, sizes, bounds and cuts as tuples.

Pure: no Kafka. The requests a task sends are caught before the socket (``_request``), so the
transaction bound, the cut only between input records and the dead letter of a record too large
for its topic are checked on the Arrow path itself; the writer's side reads the frames back.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ikkai.contract.kafka import KafkaContext
from spark_jobs.sink import executor_writer_client
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.dead_letters import REASON_HEADER
from spark_jobs.sink.partition_transactions import PartitionResult
from spark_jobs.sink.record import Record
from spark_jobs.sink.record_table import (
    fits,
    ipc_frames,
    read_frames,
    record_schema,
    record_table,
    table_of,
    table_records,
    table_sizes,
)
from spark_jobs.sink.size_bounds import (
    FRAME_SLACK_BYTES,
    record_bytes,
    record_sizes,
    set_aside_too_large,
    transaction_chunks,
)


def config(**changes: object) -> SinkConfig:
    settings: dict[str, object] = {
        "app": "test", "query": "q", "cluster": KafkaContext("localhost:1"), "output_topics": ("out", "dlq"),
        "partitions": 2, "order_by": ("input_partition", "input_offset"), "source_topic": "in",
        "dlq_topic": "dlq", "dlq_stage": "infer",
    }  # fmt: skip
    return SinkConfig(**{**settings, **changes})  # type: ignore[arg-type]


headers = st.none() | st.lists(st.tuples(st.text(max_size=6), st.text(max_size=12)), max_size=3)


@st.composite
def batches(draw: st.DrawFn) -> list[Record]:
    """Records in the jobs' order: per input record (partition, growing offset) one to three outputs."""
    offsets = dict.fromkeys(range(3), 0)
    records: list[Record] = []
    for partition, count in draw(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), max_size=25)):
        offsets[partition] += 1
        for n in range(count):
            value = draw(st.none() | st.binary(max_size=3_000))
            timestamp = draw(st.none() | st.integers(0, 2**40))
            records.append((f"t{n}", draw(st.binary(min_size=1, max_size=20)), value, timestamp, draw(headers),
                            partition, offsets[partition]))  # fmt: skip
    return records


@settings(max_examples=150, deadline=None)
@given(records=batches(), split=st.integers(0, 40))
def test_a_table_holds_the_same_records_and_sizes_as_the_tuples(records: list[Record], split: int) -> None:
    """Sizes vectorized, headers included, on a table of several chunks and a slice of one."""
    table = table_of(records)
    assert table_records(table) == records
    assert table_sizes(table).tolist() == record_sizes(records)
    split = min(split, len(records))
    chunked = pa.concat_tables([table.slice(0, split), table.slice(split)])
    assert table_sizes(chunked).tolist() == record_sizes(records)
    assert table_sizes(table.slice(split)).tolist() == record_sizes(records[split:])
    assert table_records(table.slice(split)) == records[split:]


@settings(max_examples=100, deadline=None)
@given(records=batches(), bound=st.integers(1, 20_000))
def test_frames_are_bounded_by_their_records_bytes_and_read_back_whole(records: list[Record], bound: int) -> None:
    table = table_of(records)
    sizes = table_sizes(table)
    frames = ipc_frames(table, sizes, bound)
    read = [read_frames([frame]) for frame in frames]
    assert table_records(read_frames(frames)) == records  # nothing lost, nothing twice, the order kept
    start = 0
    for frame, part in zip(frames, read, strict=True):
        size = int(sizes[start : start + len(part)].sum())
        assert size <= bound or len(part) == 1  # one record a frame at least
        assert frame.size <= size + FRAME_SLACK_BYTES  # the writer's bound holds for the Arrow bytes too
        start += len(part)


def test_the_sinks_columns_become_the_record_table_and_a_row_without_its_input_record_is_refused() -> None:
    rows = pa.table({
        "topic": ["out"], "key": [b"k"], "value": [b"v"], "timestamp": pa.array([None], pa.int64()),
        "input_partition": pa.array([1], pa.int32()), "input_offset": [7], "seq": [0],
    })  # fmt: skip
    table = record_table(rows, "headers", ("input_partition", "input_offset"))
    assert table.schema.equals(record_schema())
    assert table_records(table) == [("out", b"k", b"v", None, None, 1, 7)]
    missing = rows.set_column(5, "input_offset", pa.array([None], pa.int64()))
    with pytest.raises(Exception, match="does not name its input record"):
        record_table(missing, "headers", ("input_partition", "input_offset"))


def test_a_record_over_its_topics_limit_does_not_fit() -> None:
    sink = config(topic_max_message_bytes={"t0": 5_000, "t1": 1_048_588})
    records: list[Record] = [("t1", b"k", b"v" * 6_000, None, None, 0, 1), ("t0", b"k", b"v" * 10, None, None, 0, 2)]
    assert fits(sink, table_of(records), table_sizes(table_of(records)))
    over = [*records, ("t0", b"k", b"v" * 6_000, None, None, 0, 3)]
    assert not fits(sink, table_of(over), table_sizes(table_of(over)))


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[list[Record]]:
    """What ``write_through_executor`` sends, one request a transaction, caught before the socket."""
    sent: list[list[Record]] = []

    def request(config: SinkConfig, batch_id: int, partition: int, table: Any, sizes: Any, _: Any) -> PartitionResult:
        assert sizes.tolist() == table_sizes(table).tolist()
        sent.append(table_records(read_frames(ipc_frames(table, sizes, 1 << 20))))
        return PartitionResult(partition, batch_id, len(table), skipped=False)

    monkeypatch.setattr(executor_writer_client, "_request", request)
    return sent


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # cleared each
@given(records=batches(), bound=st.integers(1, 20_000))
def test_a_task_sends_one_request_per_transaction_cut_as_the_writer_cuts(
    records: list[Record], bound: int, requests: list[list[Record]]
) -> None:
    """The task's requests are the writer's transactions: within the bound, cut only between input records."""
    requests.clear()
    sink = config(max_transaction_bytes=bound)
    result = executor_writer_client.write_through_executor(sink, 3, 1, table_of(records), executor=1)
    assert result.records == len(records)
    assert requests == ([list(c) for c in transaction_chunks(records, bound)] if records else [])
    assert result.skipped is False  # an empty batch too: written, not found committed
    for before, after in itertools.pairwise(requests):
        assert before[-1][5:] != after[0][5:]  # never inside one input record
    for request in requests:
        assert sum(record_bytes(r) for r in request) <= bound or len({r[5:] for r in request}) == 1


def test_a_task_sends_a_records_dead_letter_in_its_place(requests: list[list[Record]]) -> None:
    sink = config(topic_max_message_bytes={"out": 5_000, "dlq": 1_048_588})
    records: list[Record] = [
        ("out", b"a", b"v" * 10, None, None, 0, 1), ("out", b"b", b"v" * 6_000, None, None, 0, 2),
        ("out", b"c", b"v" * 10, None, [("h", "x")], 0, 3),
    ]  # fmt: skip
    executor_writer_client.write_through_executor(sink, 0, 0, records, executor=1)
    [sent] = requests
    letters = set_aside_too_large(sink, records)
    assert [r[0] for r in sent] == ["out", "dlq", "out"]
    assert [r[:4] + r[5:] for r in sent] == [r[:4] + r[5:] for r in letters]
    assert dict(sent[1][4] or ())[REASON_HEADER] == dict(letters[1][4] or {})[REASON_HEADER]

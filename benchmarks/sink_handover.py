"""The writer half of the per-event path: a task's records to the executor writer, pickled tuples against Arrow.

    python -m benchmarks.sink_handover [--records 100000] [--rounds 7]

A partition's batch shaped like infer's output (``sink_sizes.batch``: a decision per event, an outbox
request for one in five, a dead letter with headers for one in a hundred), as the write task has it
(an Arrow table of the sink's columns), goes the whole way to the producer, in one process:

- **tuples** (as it was): a tuple per record from the columns, the set-aside, the cut into
  transactions and frames record by record, each frame pickled; in the writer unpickled, sized,
  set aside and cut again, then the records past the marker produced.
- **arrow** (as it is): the table normalised (``record_table``), sized, checked and cut on its
  columns, each frame an Arrow IPC stream; in the writer read back, tuples made column by column
  with the sizes from the columns, set aside and cut, then produced the same way.

The socket itself is left out (its bytes are given per record); the producer is one without a
broker (its queue takes the records, purged after each round): ``produce`` costs the same on
both paths. Rounds alternate, so a neighbour's load falls on both; the tables give µs per record
(the median round) and the ratios. A third table: ``produce`` per record against
``Producer.produce_batch`` per topic for the same records (see ``measure_produce_batch``).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
from collections.abc import Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from benchmarks.sink_sizes import batch, bench_config, per_record_us
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.partition_transactions import uncommitted
from spark_jobs.sink.producer_pool import produce
from spark_jobs.sink.record import Record, origin
from spark_jobs.sink.record_table import (
    fits,
    ipc_frames,
    read_frames,
    record_table,
    table_of,
    table_records,
    table_sizes,
)
from spark_jobs.sink.size_bounds import (
    frame_bytes,
    record_bytes,
    record_sizes,
    set_aside_too_large,
    transaction_chunks,
    transaction_starts,
)

SOURCE_COLUMNS = ("input_partition", "input_offset")


def _chunks_as_it_was(records: Sequence[Record], max_bytes: int, sizes: Sequence[int] | None) -> list[Sequence[Record]]:
    """The cut into transactions record by record, as the writer did before it cut on arrays."""
    sizes = record_sizes(records) if sizes is None else sizes
    last: dict[int, int] = {}
    previous = None
    for record in records:
        if origin(record) != previous:
            partition, offset = origin(record)
            assert offset > last.get(partition, -1), "the benchmark's batch is in input order"
            last[partition], previous = offset, origin(record)
    inputs: list[list[int]] = []
    for i, record in enumerate(records):
        if i == 0 or origin(record) != origin(records[i - 1]):
            inputs.append([i, 0])
        inputs[-1][1] += sizes[i]
    chunks: list[Sequence[Record]] = []
    start, size = 0, 0
    for first, bytes_ in inputs:
        if first > start and size + bytes_ > max_bytes:
            chunks.append(records[start:first])
            start, size = first, 0
        size += bytes_
    chunks.append(records[start:])
    return chunks


def _frames_as_it_was(records: Sequence[Record], max_bytes: int) -> list[bytes]:
    frames: list[bytes] = []
    start, size = 0, 0
    for i, record in enumerate(records):
        bytes_ = record_bytes(record)
        if i > start and size + bytes_ > max_bytes:
            frames.append(pickle.dumps(list(records[start:i]), protocol=pickle.HIGHEST_PROTOCOL))
            start, size = i, 0
        size += bytes_
    frames.append(pickle.dumps(list(records[start:]), protocol=pickle.HIGHEST_PROTOCOL))
    return frames


def tuples_task(rows: pa.Table, config: SinkConfig) -> list[list[bytes]]:
    """The task's side as it was: tuples, then one request (its pickled frames) per transaction."""
    columns = ("topic", "key", "value", "timestamp", "headers", *SOURCE_COLUMNS)
    records: list[Record] = list(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))
    chunks = _chunks_as_it_was(set_aside_too_large(config, records), config.max_transaction_bytes, None)
    return [_frames_as_it_was(chunk, frame_bytes(config)) for chunk in chunks]


def tuples_writer(request: list[bytes], config: SinkConfig) -> list[Record]:
    """The writer's side as it was, up to the producer: what it produces."""
    records: list[Record] = [r for frame in request for r in pickle.loads(frame)]  # noqa: S301 - our own bytes
    sizes = record_sizes(records)
    kept = set_aside_too_large(config, records, sizes=sizes)
    chunks = _chunks_as_it_was(kept, config.max_transaction_bytes, sizes if kept is records else None)
    return [r for chunk in chunks for r in uncommitted(chunk, {})[0]]


def arrow_task(rows: pa.Table, config: SinkConfig) -> list[list[pa.Buffer]]:
    """The task's side now (``write_tasks._write_partition``, ``write_through_executor``): Arrow frames per request."""
    table = record_table(rows, "headers", SOURCE_COLUMNS)
    sizes = table_sizes(table)
    assert fits(config, table, sizes), "the benchmark's batch fits"
    origins = table.column("source_partition").to_numpy(), table.column("source_offset").to_numpy()
    starts = transaction_starts(*origins, sizes, config.max_transaction_bytes)
    return [
        ipc_frames(table.slice(start, stop - start), sizes[start:stop], frame_bytes(config))
        for start, stop in zip(starts, [*starts[1:], len(table)], strict=True)
    ]


def arrow_writer(request: list[pa.Buffer], config: SinkConfig) -> list[Record]:
    """The writer's side now (``executor_writer.read_request``, then ``write_partition``), up to the producer."""
    table = read_frames(request)
    records, sizes = table_records(table), table_sizes(table).tolist()
    kept = set_aside_too_large(config, records, sizes=sizes)
    chunks = transaction_chunks(kept, config.max_transaction_bytes, sizes if kept is records else None)
    return [r for chunk in chunks for r in uncommitted(chunk, {})[0]]


def producer() -> Any:
    """A producer without a broker: its queue takes every record of a round (purged after it)."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 10_000_000,
                     "queue.buffering.max.kbytes": 2_000_000, "linger.ms": 5, "log_level": 0})  # fmt: skip


def produce_each(kafka: Any, records: Sequence[Record]) -> None:
    for topic, key, value, timestamp, headers, _, _ in records:
        produce(kafka, topic, key, value, 0, timestamp, headers)
    kafka.purge()


def produce_batches(kafka: Any, records: Sequence[Record]) -> None:
    """``produce_batch`` per topic where it may be used (no headers, no timestamp), ``produce`` for the rest.

    What a writer using it must do: every run of records is grouped per topic (the order across
    topics within one partition's transaction does not matter to a reader of one topic), a message
    with headers or a timestamp goes through ``produce``, and the count returned is checked (a full
    queue fails the rest of the call per message, with ``_error`` set, instead of raising).
    """
    per_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, key, value, timestamp, headers, _, _ in records:
        if headers or timestamp is not None:
            produce(kafka, topic, key, value, 0, timestamp, headers)
        else:
            per_topic.setdefault(topic, []).append({"key": key, "value": value})
    for topic, messages in per_topic.items():
        queued = kafka.produce_batch(topic, messages, partition=0)
        assert queued == len(messages), "the queue holds a round"
    kafka.purge()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    config = bench_config(order_by=SOURCE_COLUMNS, max_transaction_bytes=16 * 1024 * 1024)
    records = batch(args.records)
    rows = table_of(records).rename_columns(["topic", "key", "value", "timestamp", "headers", *SOURCE_COLUMNS])
    old_requests, new_requests = tuples_task(rows, config), arrow_task(rows, config)
    old_out = [r for q in old_requests for r in tuples_writer(q, config)]
    new_out = [r for q in new_requests for r in arrow_writer(q, config)]
    assert old_out == new_out == table_records(table_of(records)), "the two paths must produce the same records"
    n = len(records)
    kafka = producer()
    spent: dict[str, list[float]] = {k: [] for k in ("old task", "new task", "old writer", "new writer", "produce")}
    spent |= {"produce each": [], "produce_batch": []}
    for _ in range(args.rounds):
        spent["old task"].append(per_record_us(lambda: tuples_task(rows, config), n))
        spent["new task"].append(per_record_us(lambda: arrow_task(rows, config), n))
        spent["old writer"].append(per_record_us(lambda: [tuples_writer(q, config) for q in old_requests], n))
        spent["new writer"].append(per_record_us(lambda: [arrow_writer(q, config) for q in new_requests], n))
        spent["produce each"].append(per_record_us(lambda: produce_each(kafka, new_out), n))
        spent["produce_batch"].append(per_record_us(lambda: produce_batches(kafka, new_out), n))
    median = {k: statistics.median(v) for k, v in spent.items() if v}
    produce_us = median["produce each"]
    old_bytes = sum(len(f) for q in old_requests for f in q) / n
    new_bytes = sum(f.size for q in new_requests for f in q) / n
    print(f"{n:,} records of one partition, task -> executor writer -> producer, {args.rounds} rounds (median)")
    print(f"{'step':<40}{'tuples µs/rec':>15}{'arrow µs/rec':>15}{'arrow/tuples':>14}")
    for step, old, new in (
        ("task: records, bounds, frames", median["old task"], median["new task"]),
        ("writer: read, sizes, bounds, pending", median["old writer"], median["new writer"]),
        ("both, without produce", median["old task"] + median["old writer"], median["new task"] + median["new writer"]),
        ("both, with produce", median["old task"] + median["old writer"] + produce_us,
         median["new task"] + median["new writer"] + produce_us),
    ):  # fmt: skip
        print(f"{step:<40}{old:>15.3f}{new:>15.3f}{new / old:>14.2f}")
    print(f"{'frame bytes per record (socket)':<40}{old_bytes:>15.1f}{new_bytes:>15.1f}{new_bytes / old_bytes:>14.2f}")
    print()
    batch_us = median["produce_batch"]
    print(f"{'into the producer (no broker)':<40}{'µs/rec':>15}")
    print(f"{'produce, one call per record':<40}{produce_us:>15.3f}")
    print(f"{'produce_batch per topic (+ dicts)':<40}{batch_us:>15.3f}")
    print(f"{'produce_batch / produce':<40}{batch_us / produce_us:>15.2f}")


if __name__ == "__main__":
    main()

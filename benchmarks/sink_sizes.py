"""The writer's size rules per record: sizing each record in each rule against one size pass, side by side.

    python -m benchmarks.sink_sizes [--records 100000] [--rounds 7]

A batch shaped like infer's output (a decision per event, an outbox request for one in five, a
dead letter with headers for one in a hundred) goes through what ``write_partition`` does before
it produces: the set-aside of records too large for their topic, then the cut into
transactions. Old: each rule sizes every record itself and looks the topic's limit up per
record (as the writer did). New: ``record_sizes`` once, the limit once per topic. Rounds
alternate; the table gives µs per record (median round) and the ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ikkai.contract.kafka import KafkaContext
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.record import TOPIC, Record, origin
from spark_jobs.sink.size_bounds import (
    SizedSink,
    record_bytes,
    record_limit,
    record_sizes,
    set_aside_too_large,
    transaction_chunks,
)


def _sized_each_time(config: SizedSink, records: Sequence[Record], max_bytes: int) -> list[Sequence[Record]]:
    """The writer as it was, for a batch where everything fits (the benchmark's): the set-aside's scan sized every
    record and looked its topic's limit up, then the cut sized them all again."""
    too_large: set[tuple[int, int]] = set()
    for record in records:
        input_record = origin(record)
        if input_record in too_large:
            continue
        if record_bytes(record) > record_limit(config, record[TOPIC]):
            too_large.add(input_record)
    assert not too_large, "the benchmark's batch fits: the old set-aside returned it as it was"
    return transaction_chunks(records, max_bytes)


def _one_pass(config: SizedSink, records: Sequence[Record], max_bytes: int) -> list[Sequence[Record]]:
    sizes = record_sizes(records)
    kept = set_aside_too_large(config, records, sizes=sizes)
    return transaction_chunks(kept, max_bytes, sizes if kept is records else None)


def batch(count: int) -> list[Record]:
    out: list[Record] = []
    for offset in range(count):
        key = f"pay-{offset:08d}".encode()
        if offset % 100 == 7:
            headers = {"ikkai.dlq.stage": "infer", "ikkai.dlq.error_class": "SchemaError", "ikkai.dlq.reason": "x" * 80}
            out.append(("dlq.infer", key, b"d" * 400, None, headers, offset % 2, offset))
            continue
        out.append(("decisions.fraud", key, b"v" * 260, None, None, offset % 2, offset))
        if offset % 5 == 0:
            out.append(("outbox.requests", key, b"o" * 420, None, None, offset % 2, offset))
    out.sort(key=lambda r: (r[5], r[6]))
    return out


def per_record_us(step: Callable[[], Any], records: int) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) / records * 1e6


def bench_config(**changes: Any) -> SinkConfig:
    """The sink settings of infer's three output topics, as the writer benchmarks use them (no cluster is asked)."""
    config = SinkConfig(
        app="bench", query="q", cluster=KafkaContext("localhost:1"), source_topic="events.payments",
        output_topics=("decisions.fraud", "outbox.requests", "dlq.infer"), partitions=2,
        order_by=("input_partition", "input_offset", "seq"), dlq_topic="dlq.infer", dlq_stage="infer",
        topic_max_message_bytes={"decisions.fraud": 1_048_588, "outbox.requests": 1_048_588, "dlq.infer": 1_048_588},
    )  # fmt: skip
    return dataclasses.replace(config, **changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    config = bench_config()
    records = batch(args.records)
    max_bytes = 4 * 1024 * 1024
    assert _sized_each_time(config, records, max_bytes) == _one_pass(config, records, max_bytes)
    old: list[float] = []
    new: list[float] = []
    for _ in range(args.rounds):
        old.append(per_record_us(lambda: _sized_each_time(config, records, max_bytes), len(records)))
        new.append(per_record_us(lambda: _one_pass(config, records, max_bytes), len(records)))
    o, n = statistics.median(old), statistics.median(new)
    print(f"the writer's size rules, {len(records)} records, {args.rounds} alternating rounds (median)")
    print(f"{'path':<32}{'µs/record':>10}")
    print(f"{'each rule sizes each record':<32}{o:>10.3f}")
    print(f"{'one size pass':<32}{n:>10.3f}")
    print(f"{'new / old':<32}{n / o:>10.2f}")


if __name__ == "__main__":
    main()

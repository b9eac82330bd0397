"""No size can stop a job: records too large to produce become dead letters, transactions are bounded in bytes.

Issue 27, items 4 and 5. The pure parts (the set-aside pre-pass, the cut into transactions) are
tested record by record; the enrich job as its own process writes a batch of 200 dead letters of
500 KiB each on the real stack, in transactions the markers show bounded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from confluent_kafka import Producer

from demo.pipeline_io import by_partition, create_topic, flat, unique
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich import reasons as r
from spark_jobs.job_shell import default_max_transaction_bytes
from spark_jobs.sink.commit_markers import CommitMarker
from spark_jobs.sink.dead_letters import (
    DEAD_LETTER_VALUE_BYTES,
    OUTPUT_TOPIC_HEADER,
    TOO_LARGE,
    VALUE_BYTES_HEADER,
    VALUE_SHA256_HEADER,
)
from spark_jobs.sink.partition_transactions import (
    DEFAULT_MAX_TRANSACTION_BYTES,
    Record,
    SinkConfig,
    record_bytes,
    set_aside_too_large,
    transaction_chunks,
)
from tests.spark_jobs.enrich_process import EnrichProcess, EnrichTopics

KIB = 1024


def config(**changes: object) -> SinkConfig:
    settings: dict[str, object] = {
        "app": "test", "query": "q", "cluster": KafkaContext("localhost:1"), "output_topics": ("out", "dlq"),
        "partitions": 2, "order_by": ("input_partition", "input_offset", "seq"), "source_topic": "in",
        "dlq_topic": "dlq", "dlq_stage": "infer",
    }  # fmt: skip
    return SinkConfig(**{**settings, **changes})  # type: ignore[arg-type]


def record(offset: int, size: int = 100, topic: str = "out", partition: int = 0) -> Record:
    return (topic, f"pay-{offset}".encode(), b"v" * size, None, None, partition, offset)


def test_the_byte_bound_is_derived_from_the_transaction_timeout() -> None:
    assert default_max_transaction_bytes() == DEFAULT_MAX_TRANSACTION_BYTES == 60 * KIB * KIB
    assert default_max_transaction_bytes(10_000) == 10 * KIB * KIB
    assert default_max_transaction_bytes(1_000) == 4 * KIB * KIB  # never below one large record's room


def test_a_batch_is_cut_between_input_records_never_inside_one() -> None:
    size = record_bytes(record(0, 100))
    records = [record(0), record(0, topic="outbox"), record(1), record(2), record(2, topic="outbox"), record(3)]
    chunks = transaction_chunks(records, 2 * size)
    assert [[(r[0], r[6]) for r in chunk] for chunk in chunks] == [
        [("out", 0), ("outbox", 0)], [("out", 1)], [("out", 2), ("outbox", 2)], [("out", 3)]
    ]  # fmt: skip
    assert all(sum(record_bytes(r) for r in chunk) <= 2 * size for chunk in chunks)
    assert transaction_chunks(records, 10 * size) == [records]
    assert transaction_chunks(records, 1) == [records[:2], records[2:3], records[3:5], records[5:]]


def test_a_batch_whose_source_offsets_go_back_is_never_cut() -> None:
    """A cut there would let the first transaction's marker claim a record the second still holds."""
    back = [record(5), record(3), record(7)]
    assert transaction_chunks(back, 1) == [back]
    apart = [record(5), record(6, partition=1), record(5)]  # one input record's outputs not adjacent
    assert transaction_chunks(apart, 1) == [apart]
    two_inputs = [record(5), record(9), record(2, partition=1), record(3, partition=1)]
    assert len(transaction_chunks(two_inputs, 1)) == 4


def test_a_record_too_large_to_produce_becomes_one_dead_letter_for_its_input_record() -> None:
    huge = 1_200_000
    records = [record(0), record(1, huge), record(1, 50, topic="outbox"), record(2)]
    out = set_aside_too_large(config(), records)
    assert [(r[0], r[6]) for r in out] == [("out", 0), ("dlq", 1), ("out", 2)]
    _, key, value, _, headers, source_partition, source_offset = out[1]
    assert (key, source_partition, source_offset) == (b"pay-1", 0, 1)
    letter = default_codec().decode("dead_letter", value)
    assert letter["error_class"] == TOO_LARGE and letter["stage"] == "infer" and letter["source_topic"] == "in"
    assert letter["value"] == b"v" * DEAD_LETTER_VALUE_BYTES
    assert letter["headers"][VALUE_BYTES_HEADER] == str(huge)
    assert letter["headers"][VALUE_SHA256_HEADER] == hashlib.sha256(b"v" * huge).hexdigest()
    assert letter["headers"][OUTPUT_TOPIC_HEADER] == "out" and dict(headers or {}) == letter["headers"]
    assert "over the 1,000,000 bytes the producer takes" in letter["reason"] and len(letter["reason"]) < 200
    assert record_bytes(out[1]) < 1_000_000  # the dead letter itself always fits


def test_what_fits_is_left_alone_and_without_a_dlq_nothing_is_set_aside() -> None:
    fits = [record(0, 1_000_000 - 2 * KIB), record(1)]
    assert set_aside_too_large(config(), fits) is fits
    huge = [record(0, 2_000_000)]
    assert set_aside_too_large(config(dlq_topic=""), huge) is huge
    smaller = config(producer_config={"message.max.bytes": "300000"})
    assert set_aside_too_large(smaller, [record(0, 400_000)])[0][0] == "dlq"


@pytest.mark.integration
@pytest.mark.timeout(1800)  # 100 MB through Kafka and the enrich job: slow on a loaded 2-core machine
def test_a_batch_of_200_dead_letters_of_500_kib_commits_in_transactions_bounded_in_bytes(
    bootstrap: str, tmp_path: Path
) -> None:
    """Issue 27 item 5: 25,000 records a batch, dead letters up to 512 KiB each: one transaction of gigabytes."""
    partitions, count, size, timeout_ms = 2, 200, 500 * KIB, 10_000
    name = unique("big")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"masterdata.merchants.{name}",
                          f"masterdata.customers.{name}")  # fmt: skip
    create_topic(bootstrap, topics.input, partitions)
    producer = Producer(KafkaContext.of(bootstrap).producer_config())
    for i in range(count):  # not JSON: each line is a dead letter carrying all of its 500 KiB
        key = f"pay-big-{i}".encode()
        producer.produce(topics.input, key=key, value=b"{" + b"x" * (size - 1), partition=kafka_partition(key, 2))
        producer.poll(0)
    assert producer.flush(120) == 0
    query = unique("big")
    job = EnrichProcess(bootstrap, topics, tmp_path, query, "--create-topics", "--partitions", str(partitions),
                        "--transaction-timeout-ms", str(timeout_ms))  # fmt: skip
    assert job.wait(1500) == 0, job.tail()

    codec = default_codec()
    letters = [codec.decode("dead_letter", value) for _, value in flat(by_partition(bootstrap, topics.dlq))]
    assert sorted(f"{d['source_partition']}/{d['source_offset']}" for d in letters) == sorted(
        f"{p}/{o}" for p, o in {(d["source_partition"], d["source_offset"]) for d in letters}
    )  # each input record once
    assert len(letters) == count and {d["error_class"] for d in letters} == {r.NOT_JSON}
    assert all(len(d["value"]) == size for d in letters)

    # Every marker the job committed (read_committed): one per transaction, each within the byte bound.
    commits = by_partition(bootstrap, f"_ikkai.commits.ikkai.{query}")
    bound = default_max_transaction_bytes(timeout_ms)
    for partition, records in commits.items():
        markers = [CommitMarker.decode(value, codec) for _, value in records if value is not None]
        written = sum(1 for d in letters if d["source_partition"] == partition)
        assert sum(m.records for m in markers) == written
        assert max(m.records for m in markers) * size <= bound, [m.records for m in markers]
        assert len(markers) >= written * size // bound

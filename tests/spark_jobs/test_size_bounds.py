"""No size can stop a job: records too large to produce become dead letters, transactions are bounded in bytes.

Issue 27, items 4 and 5; issue 43, case 5 (each topic's own max.message.bytes, read at start and
again on the broker's refusal). The pure parts (the set-aside pre-pass, the cut into transactions,
the frames) are tested record by record; on the real stack, the enrich job as its own process writes
a batch of 200 dead letters of 500 KiB in transactions the markers show bounded, and dead letters
too large for their DLQ topic.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.payments_simulation import generate_profiles
from demo.raw_payments import RawLine, mixed_stream, produce_lines
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from ikkai.errors import ConfigError
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.master_data import publish_profiles
from spark_jobs.options import default_max_transaction_bytes
from spark_jobs.sink.commit_markers import CommitMarker, ensure_commits_topic
from spark_jobs.sink.config import DEFAULT_MAX_TRANSACTION_BYTES, SinkConfig
from spark_jobs.sink.dead_letters import (
    DEAD_LETTER_VALUE_BYTES,
    OUTPUT_TOPIC_HEADER,
    REASON_HEADER,
    TOO_LARGE,
    VALUE_BYTES_HEADER,
    VALUE_SHA256_HEADER,
)
from spark_jobs.sink.partition_transactions import write_partition
from spark_jobs.sink.record import Record
from spark_jobs.sink.size_bounds import (
    DeadLetterTooLarge,
    producer_batch_bytes,
    read_topic_limits,
    record_bytes,
    record_sizes,
    request_frames,
    set_aside_too_large,
    transaction_chunks,
)
from stack.kit.topic_io import by_partition, create_topic, flat, unique
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


def test_a_batch_whose_source_offsets_go_back_is_never_cut_and_refused_over_the_bound() -> None:
    """A cut there would let the first transaction's marker claim a record the second still holds."""
    back = [record(5), record(3), record(7)]
    assert transaction_chunks(back, 10 * record_bytes(back[0])) == [back]
    with pytest.raises(ConfigError, match="order_by") as refused:
        transaction_chunks(back, 1)
    assert "input partition and input offset first" in str(refused.value)
    apart = [record(5), record(6, partition=1), record(5)]  # one input record's outputs not adjacent
    assert transaction_chunks(apart, 10 * record_bytes(apart[0])) == [apart]
    with pytest.raises(ConfigError, match="order_by"):  # a cut between them would split that input record
        transaction_chunks(apart, 1)
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
    assert "over the 1,000,000 bytes a record may have there" in letter["reason"] and len(letter["reason"]) < 300
    assert record_bytes(out[1]) < 1_000_000  # the dead letter itself always fits


def test_what_fits_is_left_alone_and_without_a_dlq_nothing_is_set_aside() -> None:
    fits = [record(0, 1_000_000 - 2 * KIB), record(1)]
    assert set_aside_too_large(config(), fits) is fits
    huge = [record(0, 2_000_000)]
    assert set_aside_too_large(config(dlq_topic=""), huge) is huge
    smaller = config(producer_config={"message.max.bytes": "300000"})
    assert set_aside_too_large(smaller, [record(0, 400_000)])[0][0] == "dlq"


def test_a_record_over_its_own_topics_max_message_bytes_is_set_aside_and_its_letter_fits_the_dlq_topic() -> None:
    """Each topic's limit, not only the producer's; the dead letter cut to what the DLQ topic takes, reason kept."""
    limits = {"out": 300_000, "outbox": 1_048_588, "dlq": 40_000}
    sink = config(topic_max_message_bytes=limits)
    records = [record(0, 250_000), record(1, 310_000), record(1, 50, topic="outbox"), record(2, 100_000, "outbox")]
    out = set_aside_too_large(sink, records)
    assert [(r[0], r[6]) for r in out] == [("out", 0), ("dlq", 1), ("outbox", 2)]
    letter = default_codec().decode("dead_letter", out[1][2])
    assert record_bytes(out[1]) <= limits["dlq"] and 0 < len(letter["value"]) < 40_000
    assert "over the 300,000 bytes a record may have there" in letter["reason"]
    assert letter["headers"][VALUE_BYTES_HEADER] == "310000" and letter["headers"][OUTPUT_TOPIC_HEADER] == "out"
    assert producer_batch_bytes(sink) == 40_000 - 1024  # a batch of several records fits the smallest topic
    assert producer_batch_bytes(config()) is None


def test_a_record_the_broker_refused_is_set_aside_though_within_the_limit_read() -> None:
    """The limit was lowered after it was read: the broker's refusal names the input record, which becomes a letter."""
    records = [record(0), record(1, 500), record(2)]
    out = set_aside_too_large(config(), records, refused={(0, 1)})
    assert [(r[0], r[6]) for r in out] == [("out", 0), ("dlq", 1), ("out", 2)]
    letter = default_codec().decode("dead_letter", out[1][2])
    assert "MSG_SIZE_TOO_LARGE" in letter["reason"] and letter["value"] == b"v" * 500


def test_a_dead_letter_too_large_for_the_dlq_topic_keeps_its_first_reason() -> None:
    first = (
        "dlq", b"pay-1", b"d" * 90_000, None, {"ikkai.dlq.error_class": "not_json", "ikkai.dlq.reason": "not JSON"},
        0, 1,
    )  # fmt: skip
    out = set_aside_too_large(config(topic_max_message_bytes={"dlq": 30_000}), [first])
    letter = default_codec().decode("dead_letter", out[0][2])
    assert (
        letter["error_class"] == TOO_LARGE and "it was a dead letter already (not_json: not JSON)" in letter["reason"]
    )
    assert record_bytes(out[0]) <= 30_000


def test_a_dlq_topic_too_small_for_any_dead_letter_is_refused_with_the_limit_to_set() -> None:
    with pytest.raises(DeadLetterTooLarge) as refused:
        set_aside_too_large(config(topic_max_message_bytes={"out": 2_000, "dlq": 1_200}), [record(0, 5_000)])
    assert "--entity-name dlq --add-config max.message.bytes=" in str(refused.value)


def test_frames_to_the_executor_writer_are_bounded_and_keep_every_record_in_order() -> None:
    records = [record(i, 300_000) for i in range(10)]
    bound = 3 * record_bytes(records[0])
    frames = request_frames(records, bound)
    assert [len(f) for f in frames] == [3, 3, 3, 1]
    assert all(sum(record_bytes(r) for r in f) <= bound for f in frames)
    assert [r for f in frames for r in f] == records
    assert request_frames(records, 1) == [[r] for r in records]  # one record a frame at least
    assert request_frames([], bound) == []


@pytest.mark.integration
@pytest.mark.timeout(1800)  # 100 MB through Kafka and the enrich job: slow on a loaded 2-core machine
def test_a_batch_of_200_dead_letters_of_500_kib_commits_in_transactions_bounded_in_bytes(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """Issue 27 item 5: 25,000 records a batch, dead letters up to 512 KiB each: one transaction of gigabytes."""
    partitions, count, size, timeout_ms = 2, 200, 500 * KIB, 10_000
    name = unique("big")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"masterdata.merchants.{name}",
                          f"masterdata.customers.{name}")  # fmt: skip
    create_topic(cluster, topics.input, partitions)
    producer = Producer(cluster.producer_config())
    for i in range(count):  # not JSON: each line is a dead letter carrying all of its 500 KiB
        key = f"pay-big-{i}".encode()
        producer.produce(topics.input, key=key, value=b"{" + b"x" * (size - 1), partition=kafka_partition(key, 2))
        producer.poll(0)
    assert producer.flush(120) == 0
    query = unique("big")
    job = EnrichProcess(cluster, topics, tmp_path, query, "--create-topics", "--partitions", str(partitions),
                        "--transaction-timeout-ms", str(timeout_ms))  # fmt: skip
    assert job.wait(1500) == 0, job.tail()

    codec = default_codec()
    letters = [codec.decode("dead_letter", value) for _, value in flat(by_partition(cluster, topics.dlq))]
    assert sorted(f"{d['source_partition']}/{d['source_offset']}" for d in letters) == sorted(
        f"{p}/{o}" for p, o in {(d["source_partition"], d["source_offset"]) for d in letters}
    )  # each input record once
    assert len(letters) == count and {d["error_class"] for d in letters} == {r.NOT_JSON}
    assert all(len(d["value"]) == size for d in letters)

    # Every marker the job committed (read_committed): one per transaction, each within the byte bound.
    commits = by_partition(cluster, f"_ikkai.commits.ikkai.{query}")
    bound = default_max_transaction_bytes(timeout_ms)
    for partition, records in commits.items():
        markers = [CommitMarker.decode(value, codec) for _, value in records if value is not None]
        written = sum(1 for d in letters if d["source_partition"] == partition)
        assert sum(m.records for m in markers) == written
        assert max(m.records for m in markers) * size <= bound, [m.records for m in markers]
        assert len(markers) >= written * size // bound


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_an_output_topic_with_a_smaller_max_message_bytes_gets_dead_letters_and_the_job_goes_on(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """Issue 43 case 5: the DLQ topic takes 150,000 bytes a record batch; enrich's dead letters of 300 KiB are more.

    Each of those input records becomes one ``too_large`` dead letter cut to fit that same topic,
    its first reason kept; every other record is decided as usual, over several batches, and the
    job ends its run (before: the commit failed with MSG_SIZE_TOO_LARGE on every attempt).
    """
    partitions, limit, size = 2, 150_000, 300 * KIB
    stream = mixed_stream(11, payments=60, partitions=partitions)
    name = unique("small")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"masterdata.merchants.{name}",
                          f"masterdata.customers.{name}")  # fmt: skip
    merchants, customers = generate_profiles(stream.world, 11)
    publish_profiles(cluster, merchants, customers, merchants_topic=topics.merchants,
                     customers_topic=topics.customers, transactional_id=unique("test.masterdata"))  # fmt: skip
    create_topic(cluster, topics.input, partitions)
    create_topic(cluster, topics.events, partitions)
    create_topic(cluster, topics.dlq, partitions, config={"max.message.bytes": str(limit)})
    bigs = [
        RawLine(key, b"<" + bytes([65 + i]) * (size - 1), kafka_partition(key, partitions), TOO_LARGE, None, False)
        for i, key in enumerate(f"pay-big-{i}".encode() for i in range(4))
    ]
    half = len(stream.lines) // 2
    lines = [*stream.lines[:half], *bigs, *stream.lines[half:]]
    produce_lines(cluster, topics.input, lines)
    job = EnrichProcess(cluster, topics, tmp_path, unique("small"), "--max-offsets-per-trigger", "20")
    assert job.wait(1000) == 0, job.tail()
    batches = [line for line in job.log if " committed " in line]
    assert len(batches) >= 4, job.tail()  # batches after the one with the large records

    codec = default_codec()
    events = [codec.decode("payment_event", value) for _, value in flat(by_partition(cluster, topics.events))]
    assert Counter(e["event_id"] for e in events) == Counter(stream.expected_event_ids())
    dlq = flat(by_partition(cluster, topics.dlq))
    letters = [(key, value, codec.decode("dead_letter", value)) for key, value in dlq]
    offsets = dict.fromkeys(range(partitions), 0)
    where: dict[tuple[int, int], RawLine] = {}
    for line in lines:
        where[(line.partition, offsets[line.partition])] = line
        offsets[line.partition] += 1
    seen = Counter((d["source_partition"], d["source_offset"]) for _, _, d in letters)
    assert max(seen.values()) == 1 and len(events) + len(letters) == len(lines)  # each input record one outcome
    too_large = [(k, v, d) for k, v, d in letters if d["error_class"] == TOO_LARGE]
    assert {where[(d["source_partition"], d["source_offset"])].key for _, _, d in too_large} == {b.key for b in bigs}
    for key, value, letter in too_large:
        assert len(key or b"") + len(value) + sum(len(n) + len(t) for n, t in letter["headers"].items()) < limit
        assert letter["headers"][OUTPUT_TOPIC_HEADER] == topics.dlq and letter["headers"][REASON_HEADER]
        assert f"{limit:,}" in letter["reason"] and "max.message.bytes" in letter["reason"], letter["reason"]
        assert r.NOT_JSON in letter["reason"], letter["reason"]  # the reason it was a dead letter in the first place
    for _, _, letter in letters:
        if letter["error_class"] != TOO_LARGE:
            assert letter["error_class"] == where[(letter["source_partition"], letter["source_offset"])].expected


@pytest.mark.integration
def test_a_limit_lowered_while_the_job_runs_is_read_again_on_the_brokers_refusal(cluster: KafkaContext) -> None:
    """max.message.bytes lowered after the start read it: the broker refuses the batch, the writer reads the limit
    again and writes the batch once more, the large record as a dead letter and its batch-mates as they were."""
    out, dlq = create_topic(cluster, unique("test.out")), create_topic(cluster, unique("test.dlq"))
    commits = unique("_ikkai.commits.test")
    ensure_commits_topic(cluster, commits, 1)
    admin = AdminClient(cluster.client_config())
    read_at_start = read_topic_limits(admin, [out, dlq], 30)
    sink = config(cluster=cluster, output_topics=(out, dlq), partitions=1, commits_topic=commits,
                  query=unique("q"), dlq_topic=dlq, topic_max_message_bytes=read_at_start)  # fmt: skip
    lowered = 100_000
    setting = ConfigEntry("max.message.bytes", str(lowered), incremental_operation=AlterConfigOpType.SET)
    lower = ConfigResource(ConfigResource.Type.TOPIC, out, incremental_configs=[setting])
    for done in admin.incremental_alter_configs([lower]).values():
        done.result(30)
    give_up_at = time.monotonic() + 60
    while read_topic_limits(admin, [out], 30)[out] != lowered:
        assert time.monotonic() < give_up_at, "the lowered limit never showed"
        time.sleep(0.2)
    records = [record(0, 50_000, out), record(1, 300_000, out), record(2, 50_000, out)]
    result = write_partition(sink, 0, 0, records)
    assert result.records == 3
    assert [key for key, _ in by_partition(cluster, out)[0]] == [b"pay-0", b"pay-2"]
    [(key, value)] = by_partition(cluster, dlq)[0]
    letter = default_codec().decode("dead_letter", value)
    assert (key, letter["error_class"], letter["source_offset"]) == (b"pay-1", TOO_LARGE, 1)
    assert f"over the {lowered:,} bytes" in letter["reason"], letter["reason"]
    markers = [CommitMarker.decode(v, default_codec()) for _, v in by_partition(cluster, commits)[0] if v]
    assert markers[-1].source_offsets == {0: 3}


@settings(max_examples=200, deadline=None)
@given(
    outputs=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(0, 5_000)), min_size=1, max_size=40),
    bound=st.integers(1, 20_000),
)
def test_any_batch_in_input_order_is_cut_within_the_bound_only_between_input_records(
    outputs: list[tuple[int, int, int]], bound: int
) -> None:
    """Per input record (partition, how many outputs, value size), offsets growing per partition as the jobs order."""
    offsets = dict.fromkeys(range(3), 0)
    records: list[Record] = []
    for partition, count, size in outputs:
        offsets[partition] += 1
        records += [record(offsets[partition], size, f"t{n}", partition) for n in range(count)]
    chunks = transaction_chunks(records, bound)
    assert [r for chunk in chunks for r in chunk] == records  # nothing lost, nothing twice, the order kept
    for before, after in itertools.pairwise(chunks):
        assert (before[-1][5], before[-1][6]) != (after[0][5], after[0][6])  # never inside one input record
    for chunk in chunks:
        origins = {(r[5], r[6]) for r in chunk}
        assert sum(record_bytes(r) for r in chunk) <= bound or len(origins) == 1  # over it: one input record alone
    frames = request_frames(records, bound)
    assert [r for frame in frames for r in frame] == records
    assert all(sum(record_bytes(r) for r in f) <= bound or len(f) == 1 for f in frames)


@settings(max_examples=200, deadline=None)
@given(
    outputs=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 3), st.sampled_from([10, 3_000, 40_000, 310_000])),
        min_size=1,
        max_size=30,
    ),
    bound=st.integers(1, 400_000),
)
def test_one_size_pass_sets_aside_and_cuts_as_sizing_each_record_again_did(
    outputs: list[tuple[int, int, int]], bound: int
) -> None:
    """The writer sizes a batch once (``record_sizes``) and gives the sizes to both rules: the same dead letters, the
    same transactions as each rule sizing the records itself."""
    sink = config(topic_max_message_bytes={"t0": 300_000, "t1": 35_000, "t2": 1_048_588, "dlq": 1_048_588})
    offsets = dict.fromkeys(range(3), 0)
    records: list[Record] = []
    for partition, count, size in outputs:
        offsets[partition] += 1
        records += [record(offsets[partition], size, f"t{n}", partition) for n in range(count)]
    sizes = record_sizes(records)
    assert sizes == [record_bytes(r) for r in records]
    kept = set_aside_too_large(sink, records, sizes=sizes)
    assert kept == set_aside_too_large(sink, records)
    assert (kept is records) == all(r[0] != "dlq" for r in kept)  # nothing set aside: the sizes still hold
    chunks = transaction_chunks(kept, bound, sizes if kept is records else None)
    assert chunks == transaction_chunks(kept, bound)

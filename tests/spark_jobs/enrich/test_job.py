"""The enrich job as its own process on the real stack: the mixed stream, master data as of the event, replay.

One input (the seeded mixed stream of ``raw_payments``) and one master-data publish are shared by
the module; the crash-free run is the reference. What counts is what read_committed consumers see.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from demo.payments_simulation import generate_profiles
from demo.raw_payments import EVENT, MixedStream, RawLine, mixed_stream, produce_lines
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.master_data import CustomerProfile, MerchantProfile, publish_profiles
from stack.kit.topic_io import Partitioned, by_partition, create_topic, flat, unique
from tests.spark_jobs.enrich_process import EnrichProcess, EnrichTopics
from tests.spark_jobs.records import headers_by_value

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
BATCH = 100  # maxOffsetsPerTrigger: four micro-batches per run
RANDOM_KILLS = "IKKAI_SOAK_RANDOM_KILLS"  # set to 1 to run the random kill -9 run (a soak, not in make test)
SEED = 7


def outputs(cluster: KafkaContext, base: EnrichTopics) -> EnrichTopics:
    name = unique("t")
    topics = replace(base, events=f"events.{name}", dlq=f"dlq.{name}")
    create_topic(cluster, topics.events, PARTITIONS)
    create_topic(cluster, topics.dlq, PARTITIONS)
    return topics


def run_to_end(cluster: KafkaContext, topics: EnrichTopics, checkpoint: Path, query: str, *extra: str) -> EnrichProcess:
    job = EnrichProcess(cluster, topics, checkpoint, query, *extra)
    code = job.wait()
    assert code == 0, job.tail()
    return job


@pytest.fixture(scope="module")
def ingest(cluster: KafkaContext) -> tuple[EnrichTopics, MixedStream]:
    """Master data first, then the raw stream: every profile version was published before the events landed."""
    stream = mixed_stream(SEED, payments=300, partitions=PARTITIONS)
    name = unique("enrich")
    topics = EnrichTopics(f"ingest.{name}", "", "", f"masterdata.merchants.{name}", f"masterdata.customers.{name}")
    merchants, customers = generate_profiles(stream.world, SEED)
    publish_profiles(cluster, merchants, customers, merchants_topic=topics.merchants,
                     customers_topic=topics.customers, transactional_id=unique("test.masterdata"))  # fmt: skip
    create_topic(cluster, topics.input, PARTITIONS)
    produce_lines(cluster, topics.input, stream.lines)
    return topics, stream


@pytest.fixture(scope="module")
def reference_topics(
    cluster: KafkaContext, ingest: tuple[EnrichTopics, MixedStream], tmp_path_factory: pytest.TempPathFactory
) -> EnrichTopics:
    topics = outputs(cluster, ingest[0])
    run_to_end(cluster, topics, tmp_path_factory.mktemp("ref"), unique("ref"), "--max-offsets-per-trigger",
               str(BATCH))  # fmt: skip
    return topics


@pytest.fixture(scope="module")
def reference(cluster: KafkaContext, reference_topics: EnrichTopics) -> tuple[Partitioned, Partitioned]:
    return by_partition(cluster, reference_topics.events), by_partition(cluster, reference_topics.dlq)


def test_a_dead_letter_says_why_in_its_kafka_headers(
    bootstrap: str, reference_topics: EnrichTopics, reference: tuple[Partitioned, Partitioned]
) -> None:
    """A consumer of dlq.enrich sees stage, error class and reason without decoding the envelope."""
    codec = default_codec()
    letters = {value: codec.decode("dead_letter", value) for _, value in flat(reference[1])}
    headers = headers_by_value(bootstrap, reference_topics.dlq, expect=len(letters))
    assert set(headers) == set(letters)
    for value, letter in letters.items():
        assert headers[value] == {r.STAGE_HEADER: b"enrich", r.ERROR_CLASS_HEADER: letter["error_class"].encode(),
                                  r.REASON_HEADER: letter["reason"].encode()}  # fmt: skip


def _positions(stream: MixedStream) -> dict[tuple[int, int], int]:
    """(partition, offset) → index of the line in the stream (produce_lines keeps per-partition order)."""
    offsets = dict.fromkeys(range(stream.partitions), 0)
    where = {}
    for i, line in enumerate(stream.lines):
        where[(line.partition, offsets[line.partition])] = i
        offsets[line.partition] += 1
    return where


def test_every_valid_event_once_every_other_record_in_the_dlq_with_its_reason(
    ingest: tuple[EnrichTopics, MixedStream], reference: tuple[Partitioned, Partitioned]
) -> None:
    topics, stream = ingest
    codec = default_codec()
    events = [codec.decode("payment_event", value) for _, value in flat(reference[0])]
    letters = [codec.decode("dead_letter", value) for _, value in flat(reference[1])]
    assert Counter(e["event_id"] for e in events) == Counter(stream.expected_event_ids())
    where = _positions(stream)
    seen = Counter((d["source_partition"], d["source_offset"]) for d in letters)
    assert max(seen.values()) == 1
    for d in letters:
        line = stream.lines[where[(d["source_partition"], d["source_offset"])]]
        assert d["error_class"] == line.expected, d["reason"]
        assert (d["key"], d["value"], d["source_topic"], d["stage"]) == (line.key, line.value, topics.input, "enrich")
        assert d["headers"][r.ERROR_CLASS_HEADER] == d["error_class"] and d["headers"][r.REASON_HEADER] == d["reason"]
        assert d["reason"]
    assert len(events) + len(letters) == len(stream.lines)  # in = out + DLQ: nothing lost, nothing twice
    assert Counter(d["error_class"] for d in letters) == Counter(
        line.expected for line in stream.lines if line.expected != EVENT
    )
    assert {d["error_class"] for d in letters} == set(r.ERROR_CLASSES)


def test_events_are_normalized_keyed_by_payment_id_and_carry_no_card_number(
    ingest: tuple[EnrichTopics, MixedStream], reference: tuple[Partitioned, Partitioned]
) -> None:
    stream = ingest[1]
    codec = default_codec()
    raw = {line.event_id: line for line in stream.lines if line.expected == EVENT}
    for partition, records in reference[0].items():
        for key, value in records:
            event = codec.decode("payment_event", value)
            line = raw[event["event_id"]]
            assert key == event["payment_id"].encode() and line.partition == partition
            assert codec.writer_of(value).version == codec.catalog.get("payment_event").version
            assert event["card_masked"].startswith("************") and line.value.count(b"card_number") == 1
            assert event["card_masked"][-4:].encode() in line.value
            assert event["merchant_category"] != "unknown" and event["status"] in ("authorized", "captured")
    payments = stream.world.payments.set_index("event_id")
    for _, value in flat(reference[0]):
        event = codec.decode("payment_event", value)
        if event["event_id"] in payments.index:
            assert event["amount_minor"] == payments.loc[event["event_id"], "amount_minor"]


def _as_of(profiles: list[MerchantProfile] | list[CustomerProfile], entity: str, event_time: int) -> object:
    versions = [p for p in profiles if getattr(p, entity.split("@")[0]) == entity.split("@")[1]]
    eligible = [p for p in versions if p.valid_from <= event_time]
    return max(eligible, key=lambda p: p.valid_from) if eligible else None


def test_master_data_is_joined_as_of_the_event_time(
    ingest: tuple[EnrichTopics, MixedStream], reference: tuple[Partitioned, Partitioned]
) -> None:
    stream = ingest[1]
    merchants, customers = generate_profiles(stream.world, SEED)
    codec = default_codec()
    picked_second = 0
    for _, value in flat(reference[0]):
        event = codec.decode("payment_event", value)
        merchant = _as_of(merchants, f"merchant_id@{event['merchant_id']}", event["event_time"])
        customer = _as_of(customers, f"customer_id@{event['customer_id']}", event["event_time"])
        assert isinstance(merchant, MerchantProfile) and isinstance(customer, CustomerProfile)
        assert (event["merchant_risk_tier"], event["merchant_profile_as_of"]) == (merchant.risk_tier,
                                                                                  merchant.valid_from)  # fmt: skip
        assert (event["customer_segment"], event["customer_profile_as_of"]) == (customer.segment, customer.valid_from)
        picked_second += merchant.valid_from != min(p.valid_from for p in merchants)
    assert picked_second > 0  # some events fall after a merchant's second version began


def test_a_version_published_after_the_events_changes_nothing_and_a_replay_is_byte_identical(
    cluster: KafkaContext, ingest: tuple[EnrichTopics, MixedStream],
    reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    topics, stream = ingest
    merchants, customers = generate_profiles(stream.world, SEED)
    before_everything = min(p.valid_from for p in merchants)
    # Versions that would win for every event (valid from after the first ones, before all events)...
    late_merchants = [MerchantProfile(p.merchant_id, before_everything + 1, p.name, p.country, "late")
                      for p in merchants if p.valid_from == before_everything]  # fmt: skip
    late_customers = [CustomerProfile(p.customer_id, before_everything + 1, "late", p.home_country)
                      for p in customers if p.valid_from == before_everything]  # fmt: skip
    publish_profiles(cluster, late_merchants, late_customers, merchants_topic=topics.merchants,
                     customers_topic=topics.customers, transactional_id=unique("test.masterdata"))  # fmt: skip
    # ...but they were published after the events were ingested: a replay (one big batch) ignores them.
    replay = outputs(cluster, topics)
    run_to_end(cluster, replay, tmp_path, unique("replay"))
    assert by_partition(cluster, replay.events) == reference[0]
    assert by_partition(cluster, replay.dlq) == reference[1]


def test_a_crash_after_the_kafka_commit_changes_nothing(
    cluster: KafkaContext, ingest: tuple[EnrichTopics, MixedStream], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    """A SIGKILL right after batch 0 reached Kafka, before Spark's checkpoint, then a restart: the events and
    dead letters are the crash-free run's, byte for byte (the built interleaving; random kills are a soak)."""
    topics, query = outputs(cluster, ingest[0]), unique("crash")
    small = ("--max-offsets-per-trigger", str(BATCH // 2))
    job = EnrichProcess(cluster, topics, tmp_path, query, *small, "--crash-after-batch", "0")
    job.wait()
    assert "fault injection: SIGKILL after batch 0" in "".join(job.log), job.tail()
    run_to_end(cluster, topics, tmp_path, query, *small)
    assert by_partition(cluster, topics.events) == reference[0]
    assert by_partition(cluster, topics.dlq) == reference[1]


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get(RANDOM_KILLS), reason=f"random kills are the second line: set {RANDOM_KILLS}=1")
def test_kill_9_at_random_moments_then_restart(
    cluster: KafkaContext, ingest: tuple[EnrichTopics, MixedStream], reference: tuple[Partitioned, Partitioned],
    tmp_path: Path,
) -> None:  # fmt: skip
    """A SIGKILL at a random moment, one right after a Kafka commit (before Spark's checkpoint), then a restart.

    Random kills are the second line (the built interleavings are pinned above, in infer/test_job.py and
    sink/), a soak: with 50-record batches a kill can land mid-batch.
    """
    seed = random.randrange(1 << 30)  # noqa: S311 - chaos timing, not cryptography
    rng = random.Random(seed)  # noqa: S311
    topics, query = outputs(cluster, ingest[0]), unique("chaos")
    small = ("--max-offsets-per-trigger", str(BATCH // 2))
    job = EnrichProcess(cluster, topics, tmp_path, query, *small)
    assert job.wait_for_batches(rng.choice((0, 1, 2))), job.tail()
    time.sleep(rng.uniform(0.0, 2.0))  # the random moment: mid-batch, mid-transaction, or between batches
    job.kill()
    job = EnrichProcess(cluster, topics, tmp_path, query, *small, "--crash-after-batch", "0")
    job.wait()
    assert "fault injection: SIGKILL after batch" in "".join(job.log), job.tail()
    run_to_end(cluster, topics, tmp_path, query, *small)
    assert by_partition(cluster, topics.events) == reference[0], f"seed {seed}"
    assert by_partition(cluster, topics.dlq) == reference[1], f"seed {seed}"


def _hostile_lines(template: dict[str, Any]) -> list[RawLine]:
    """Lines that once stopped the job or slipped past validation, each with the class it must get."""
    pan, when = template["card_number"], template["event_time"]
    fullwidth = "".join(chr(0xFF10 + int(c)) if c.isdigit() else c for c in when)
    arabic = "".join(chr(0x0660 + int(c)) if c.isdigit() else c for c in when)
    cases: list[tuple[dict[str, Any] | bytes, str]] = [
        ({"customer_id": "\ud800"}, r.INVALID_UTF8),  # a JSON escape of a lone surrogate: valid JSON, not Unicode
        ({"status": "\udc00"}, r.INVALID_UTF8),  # once quoted into the reason
        ({"payment_id": "\ud83d"}, r.INVALID_UTF8),
        ({"note": [{"\udfff": "x"}]}, r.INVALID_UTF8),  # nested, in a key of an ignored field
        ({"country": "DE\n"}, r.INVALID_FIELD),
        ({"merchant_category_code": "5411\n"}, r.INVALID_FIELD),
        ({"card_number": pan + "\n"}, r.INVALID_FIELD),
        ({"amount": "12.34\n"}, r.BAD_AMOUNT),
        ({"event_time": when + "\n"}, r.BAD_TIMESTAMP),
        ({"event_time": fullwidth}, r.BAD_TIMESTAMP),
        ({"event_time": arabic}, r.BAD_TIMESTAMP),
        ({"amount": "1" * 5000}, r.ABSURD_AMOUNT),  # past Python's int conversion limit
        ({"amount": "0" * 5000}, r.NON_POSITIVE_AMOUNT),
        (b"1" * 5000, r.NOT_JSON),  # a JSON number past that limit
        (b"[" * 990 + b"]" * 990, r.NOT_JSON),  # nesting near the recursion limit
        (b"[" * 100_000, r.NOT_JSON),
    ]
    lines = []
    for i, (change, expected) in enumerate(cases):
        document = {**template, "payment_id": f"pay-hostile-{i}"}
        if isinstance(change, bytes):
            value = json.dumps({**document, "amount": "@"}).encode().replace(b'"@"', change)
        else:
            document.update(change)
            value = json.dumps(document).encode()  # ASCII: surrogates stay JSON escapes, the bytes are UTF-8
        key = document["payment_id"].encode("utf-8", "surrogatepass")
        lines.append(RawLine(key, value, kafka_partition(key, PARTITIONS), expected, None, via_connector=False))
    return lines


def test_hostile_lines_are_dead_lettered_and_the_job_goes_on(
    cluster: KafkaContext, ingest: tuple[EnrichTopics, MixedStream], tmp_path: Path
) -> None:
    """No raw line, whatever its bytes, stops the job: each hostile one lands in the DLQ with its reason."""
    topics, stream = ingest
    valid = stream.lines[:150]
    template = json.loads(next(line.value for line in valid if line.expected == EVENT))
    lines = list(valid)
    rng = random.Random(SEED)  # noqa: S311
    hostile = _hostile_lines(template)
    for line in hostile:
        lines.insert(rng.randrange(1, len(lines)), line)
    mixed = MixedStream(tuple(lines), stream.world, PARTITIONS, stream.lateness_ms, SEED)
    hostile_topics = replace(outputs(cluster, topics), input=unique("ingest.hostile"))
    create_topic(cluster, hostile_topics.input, PARTITIONS)
    produce_lines(cluster, hostile_topics.input, lines)
    run_to_end(cluster, hostile_topics, tmp_path, unique("hostile"), "--max-offsets-per-trigger", "60")
    codec = default_codec()
    events = [codec.decode("payment_event", value) for _, value in flat(by_partition(cluster, hostile_topics.events))]
    letters = {
        value: codec.decode("dead_letter", value) for _, value in flat(by_partition(cluster, hostile_topics.dlq))
    }
    assert len(events) + len(letters) == len(lines)  # in = out + DLQ
    assert Counter(e["event_id"] for e in events) == Counter(mixed.expected_event_ids())
    where = _positions(mixed)
    headers = headers_by_value(cluster.bootstrap_servers, hostile_topics.dlq, expect=len(letters))
    for value, letter in letters.items():
        line = lines[where[(letter["source_partition"], letter["source_offset"])]]
        assert letter["error_class"] == line.expected, letter["reason"]
        assert (letter["key"], letter["value"]) == (line.key, line.value)
        assert headers[value] == {r.STAGE_HEADER: b"enrich", r.ERROR_CLASS_HEADER: line.expected.encode(),
                                  r.REASON_HEADER: letter["reason"].encode()}  # fmt: skip
    classes = {letter["value"]: letter["error_class"] for letter in letters.values()}
    assert {h.value: classes.get(h.value) for h in hostile} == {h.value: h.expected for h in hostile}


def test_a_raw_line_near_the_size_limit_is_dead_lettered_cut_and_the_job_goes_on(
    cluster: KafkaContext, ingest: tuple[EnrichTopics, MixedStream], tmp_path: Path
) -> None:
    """A raw line as large as Connect may write still fits its dead letter: the copy is cut, the headers say so.

    A Connect source's producer writes records up to ``max.request.size`` (1 MiB by default) and
    the broker takes them; a dead letter carrying all of one, plus its reason, would not fit the
    sink's own producer, and the job would stop on it. The original stays where the dead letter
    points (source topic, partition, offset); the headers carry its full size and sha-256.
    """
    from confluent_kafka import Producer

    topics, stream = ingest
    valid = [line for line in stream.lines[:40] if line.expected == EVENT]
    template = {k: v for k, v in json.loads(valid[0].value).items() if k != "amount"}
    size = 1_040_000  # under the broker's and a Connect producer's 1 MiB, over librdkafka's default 1,000,000
    big = []
    for i, expected in enumerate([r.NOT_JSON, r.MISSING_FIELD]):
        key = f"pay-big-{i}".encode()
        document = json.dumps({**template, "payment_id": key.decode(), "note": ""}).encode()
        value = (
            b"x" * size
            if expected == r.NOT_JSON
            else document.replace(b'"note": ""', b'"note": "' + b"y" * size + b'"')
        )
        big.append(RawLine(key, value, kafka_partition(key, PARTITIONS), expected, None, via_connector=False))
    big_topics = replace(outputs(cluster, topics), input=unique("ingest.big"))
    create_topic(cluster, big_topics.input, PARTITIONS)
    produce_lines(cluster, big_topics.input, valid[:1])
    producer = Producer(cluster.producer_config(**{"message.max.bytes": 1_048_576}))
    for line in big:
        producer.produce(big_topics.input, value=line.value, key=line.key, partition=line.partition)
    assert producer.flush(60) == 0
    produce_lines(cluster, big_topics.input, valid[1:])
    run_to_end(cluster, big_topics, tmp_path, unique("big"))
    codec = default_codec()
    events = [codec.decode("payment_event", value) for _, value in flat(by_partition(cluster, big_topics.events))]
    assert sorted(e["event_id"] for e in events) == sorted(line.event_id for line in valid)
    letters = {v: codec.decode("dead_letter", v) for _, v in flat(by_partition(cluster, big_topics.dlq))}
    headers = headers_by_value(cluster.bootstrap_servers, big_topics.dlq, expect=len(letters))
    by_key = {letter["key"]: (value, letter) for value, letter in letters.items()}
    assert set(by_key) == {line.key for line in big}
    for line in big:
        value, letter = by_key[line.key]
        assert letter["error_class"] == line.expected, letter["reason"]
        assert len(value) < 1_000_000 and 0 < len(letter["value"]) < len(line.value)
        assert line.value.startswith(letter["value"])
        assert headers[value][r.VALUE_BYTES_HEADER] == str(len(line.value)).encode()
        assert headers[value][r.VALUE_SHA256_HEADER] == hashlib.sha256(line.value).hexdigest().encode()
        assert letter["headers"][r.VALUE_BYTES_HEADER] == str(len(line.value))

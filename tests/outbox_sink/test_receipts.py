"""Receipts as a reader should believe them, read on from where it stopped.

One receipt per side effect, DELIVERED winning over DEAD_LETTERED; each poll reads only what
arrived since the last; a reader started at the end misses nothing committed after it; a group
resumes after what it handed back and reads again what a crash held.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from ikkai.settings import Endpoints
from outbox_sink import BadReceipt, BadReceiptError, EffectRef, Receipt, ReceiptReader
from outbox_sink.receipts import reader_config
from stack.kit.topic_io import create_topic, transactional_producer, unique


class Boom(Exception):
    pass


def receipt(outcome: str, *, attempts: int = 1, target: str = "payments-api", effect: str | None = None) -> Receipt:
    status = 201 if outcome == "DELIVERED" else 503
    reason = None if outcome == "DELIVERED" else "retries-exhausted: gave up"
    made = Receipt("d-1", "pay-1", target, outcome, status, attempts, 1_000, 2_000, None, reason)  # type: ignore[arg-type]
    if effect is not None:
        made = Receipt(**{**made.to_record(), "effect": effect})
    return made


@pytest.fixture
def receipts_topic(cluster: KafkaContext) -> Iterator[tuple[str, Producer]]:
    topic = create_topic(cluster, unique("outbox.receipts"))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    yield topic, producer
    producer.flush(30)


def write(producer: Producer, topic: str, *receipts: Receipt) -> None:
    codec = default_codec()
    for r in receipts:
        producer.produce(topic, key=r.decision_id.encode(), value=codec.encode("outbox_receipt", r.to_record()))
    assert producer.flush(30) == 0


@pytest.mark.integration
@pytest.mark.parametrize(
    "order",
    [("DEAD_LETTERED", "DELIVERED"), ("DELIVERED", "DEAD_LETTERED")],
    ids=["dlq-then-delivered", "delivered-then-dlq"],
)
def test_delivered_wins_whatever_the_order(
    stack: Endpoints, receipts_topic: tuple[str, Producer], order: tuple[str, str]
) -> None:
    topic, producer = receipts_topic
    # Budget exhausted, then the DLQ record replayed (or the task redelivered it) and the effect applied.
    write(producer, topic, receipt(order[0]), receipt(order[1], attempts=2))

    with ReceiptReader(KafkaContext.recorded(stack), topic=topic) as reader:
        found = reader.wait_for(["d-1"], 30)
        reader.poll(1.0)  # nothing later changes the verdict

    assert found["d-1"].outcome == "DELIVERED"
    assert [r.outcome for r in reader.seen.values()] == ["DELIVERED"]


def receipt_of(decision_id: str, outcome: str = "DELIVERED") -> Receipt:
    return Receipt(**{**receipt(outcome).to_record(), "decision_id": decision_id})


@pytest.mark.integration
def test_a_reader_reads_on_from_where_it_stopped(receipts_topic: tuple[str, Producer], cluster: KafkaContext) -> None:
    topic, producer = receipts_topic
    write(producer, topic, receipt_of("d-1"), receipt_of("d-2"))
    with ReceiptReader(cluster, topic=topic) as reader:
        assert set(reader.wait_for(["d-1", "d-2"], 30)) == {"d-1", "d-2"}
        write(producer, topic, receipt_of("d-3"), receipt_of("d-1"), receipt_of("d-4"))  # d-1: a repeat
        got = []
        for r in reader:  # new receipts as they arrive
            got.append(r.decision_id)
            if r.decision_id == "d-4":
                break
        assert got == ["d-3", "d-4"]  # never d-1 and d-2 again
        assert reader.duplicates == 1


@pytest.mark.integration
def test_a_reader_remembers_only_the_last_effects_yet_finds_every_one_it_waits_for(
    receipts_topic: tuple[str, Producer], cluster: KafkaContext
) -> None:
    topic, producer = receipts_topic
    write(producer, topic, *(receipt_of(f"d-{i}") for i in range(5)))
    with ReceiptReader(cluster, topic=topic, remember=2) as reader:
        found = reader.wait_for([f"d-{i}" for i in range(5)], 30)
        assert sorted(found) == [f"d-{i}" for i in range(5)]
        assert [ref.decision_id for ref in reader.seen] == ["d-3", "d-4"]
        assert reader.wait_for("d-4", 0)["d-4"].delivered  # one decision id: not its characters
        assert reader.forgotten == 3

        # After its DELIVERED receipt, d-0 gets a DEAD_LETTERED one (a redelivery that ran out of budget),
        # and d-4, still remembered, too. The window is the bound docs/outbox.md states: within it
        # DELIVERED wins; beyond it the reader cannot know, returns the receipt as news, and says so
        # by `forgotten` (a reader acting on DEAD_LETTERED keeps its own verdicts).
        write(producer, topic, receipt_of("d-0", "DEAD_LETTERED"), receipt_of("d-4", "DEAD_LETTERED"))
        later = poll_until(reader, 2)
        assert [(r.decision_id, r.outcome) for r in later] == [("d-0", "DEAD_LETTERED")]
        assert reader.duplicates == 1 and reader.seen[EffectRef("d-4", "DEFAULT", "payments-api")].delivered


@pytest.mark.integration
def test_one_name_of_two_kinds_is_two_effects_and_a_receipt_before_v3_is_its_own_effect(
    receipts_topic: tuple[str, Producer], cluster: KafkaContext
) -> None:
    topic, producer = receipts_topic
    name = "api/ok/1"  # explicit effect api/ok/1; default effect of target api, path /ok/1
    sent = Receipt("d-1", "pay-1", "api", "DELIVERED", 201, 1, 1_000, 2_000, None, None, name, "e" * 64, "EXPLICIT")
    by_default = Receipt(**{**sent.to_record(), "idempotency_key": "d" * 64, "effect_kind": "DEFAULT"})
    # The same two effects receipted again by a sink before v3 (no kind): the default one redelivered, and an
    # explicit "hold-payment" first receipted by the old sink and again by the new one. Each meets its own effect.
    before_v3 = Receipt(**{**by_default.to_record(), "effect_kind": None})
    hold_v2 = Receipt(**{**sent.to_record(), "effect": "hold-payment", "effect_kind": None})
    hold_v3 = Receipt(**{**hold_v2.to_record(), "effect_kind": "EXPLICIT"})
    write(producer, topic, sent, by_default, before_v3, hold_v2, hold_v3)

    with ReceiptReader(cluster, topic=topic) as reader:
        news = poll_until(reader, 5)

    assert [r.idempotency_key for r in news] == ["e" * 64, "d" * 64, "e" * 64]
    assert list(reader.seen) == [
        EffectRef("d-1", "EXPLICIT", name),
        EffectRef("d-1", "DEFAULT", name),
        EffectRef("d-1", "EXPLICIT", "hold-payment"),
    ]
    assert reader.duplicates == 2


def poll_until(reader: ReceiptReader, records: int, timeout: float = 30.0) -> list[Receipt]:
    """What ``poll`` returns until ``records`` more records of the topic were read (returned or not)."""
    got: list[Receipt] = []
    start = reader.duplicates + len(reader.seen) + reader.forgotten + reader.corrected
    deadline = time.monotonic() + timeout
    while reader.duplicates + len(reader.seen) + reader.forgotten + reader.corrected < start + records:
        assert time.monotonic() < deadline, f"fewer than {records} records arrived in {timeout}s"
        got += reader.poll(0.5)
    return got


NOT_A_RECEIPT = b"\xc3\x01" + b"\x00" * 8 + b"not a receipt"  # single-object marker, unknown fingerprint


def read_until_error(reader: ReceiptReader, timeout: float = 30.0) -> tuple[list[str], BadReceiptError]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got += [r.decision_id for r in reader.poll(0.5)]
        except BadReceiptError as exc:
            return got, exc
    raise AssertionError(f"no BadReceiptError in {timeout}s; read {got}")


def write_with_a_bad_record(producer: Producer, topic: str) -> None:
    write(producer, topic, receipt_of("d-1"), receipt_of("d-2"))
    producer.produce(topic, key=b"d-bad", value=NOT_A_RECEIPT)
    write(producer, topic, receipt_of("d-3"), receipt_of("d-4"))  # one partition: offsets 0, 1, bad 2, 3, 4


def read_reporting_bad(
    reader: ReceiptReader, receipts: int, timeout: float = 60.0
) -> tuple[list[Receipt], list[tuple[int, int, str]]]:
    """Poll until ``receipts`` receipts came back, as a caller that logs each BadReceiptError and reads on."""
    got: list[Receipt] = []
    bad: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + timeout
    while len(got) < receipts:
        places = [(p, o) for p, o, _ in bad[:10]]
        assert time.monotonic() < deadline, f"{timeout}s: only {[r.decision_id for r in got]}; {len(bad)} bad: {places}"
        try:
            got += reader.poll(0.5)
        except BadReceiptError as exc:
            assert (exc.partition, exc.offset, exc.problem) == exc.records[0] and exc.more == 0
            bad += exc.records
    return got, bad


def write_to(producer: Producer, topic: str, partition: int, *values: Receipt | bytes) -> None:
    codec = default_codec()
    for v in values:
        value = v if isinstance(v, bytes) else codec.encode("outbox_receipt", v.to_record())
        producer.produce(topic, partition=partition, key=b"k", value=value)
    assert producer.flush(30) == 0


@pytest.mark.integration
def test_a_bad_record_is_reported_once_and_read_past_on_its_partition_and_every_other(cluster: KafkaContext) -> None:
    """One bad record on one partition once stopped the reader for all of them; now it is one BadReceiptError
    (partition, offset, problem) and the reader goes on: its partition past it, the others as they were."""
    topic = create_topic(cluster, unique("outbox.receipts"), 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    write_to(producer, topic, 0, receipt_of("d-1"), NOT_A_RECEIPT, receipt_of("d-3"), NOT_A_RECEIPT, receipt_of("d-5"))
    write_to(producer, topic, 1, NOT_A_RECEIPT, receipt_of("d-6"))
    write_to(producer, topic, 2, receipt_of("d-7"), receipt_of("d-8"))
    with ReceiptReader(cluster, topic=topic) as reader:
        got, bad = read_reporting_bad(reader, 6)
    assert sorted(r.decision_id for r in got) == ["d-1", "d-3", "d-5", "d-6", "d-7", "d-8"]
    assert [r.decision_id for r in got if r.decision_id in ("d-1", "d-3", "d-5")] == ["d-1", "d-3", "d-5"]
    assert sorted((p, o) for p, o, _ in bad) == [(0, 1), (0, 3), (1, 0)]  # each once, none lost
    assert all("UnknownWriterSchemaError" in problem for _, _, problem in bad)


@pytest.mark.integration
def test_a_group_commits_a_bad_record_once_the_caller_came_back_after_the_error(
    receipts_topic: tuple[str, Producer], cluster: KafkaContext
) -> None:
    topic, producer = receipts_topic
    group = unique("receipts-group")
    write_with_a_bad_record(producer, topic)
    with pytest.raises(BadReceiptError), ReceiptReader(cluster, topic=topic, group_id=group) as reader:
        got, caught = read_until_error(reader)
        assert got == ["d-1", "d-2"]  # its neighbours before it: handed back first
        assert (caught.topic, caught.partition, caught.offset) == (topic, 0, 2)
        raise caught  # the caller dies with the error in hand: the bad record is not committed
    with ReceiptReader(cluster, topic=topic, group_id=group) as reader:
        got, caught = read_until_error(reader)
        assert got == [] and caught.offset == 2  # read again, reported again
        assert [r.decision_id for r in poll_until(reader, 2)] == ["d-3", "d-4"]  # came back: read on past it
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        assert consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 5  # past the bad record
    finally:
        consumer.close()


@pytest.mark.integration
def test_a_bad_record_reported_to_the_callback_costs_no_neighbour(
    receipts_topic: tuple[str, Producer], cluster: KafkaContext
) -> None:
    topic, producer = receipts_topic
    write_with_a_bad_record(producer, topic)
    bad: list[BadReceipt] = []
    with ReceiptReader(cluster, topic=topic, on_bad_record=bad.append) as reader:
        got = [r.decision_id for r in poll_until(reader, 4)]
    assert got == ["d-1", "d-2", "d-3", "d-4"]
    assert [(b.partition, b.offset, b.key, b.value) for b in bad] == [(0, 2, b"d-bad", NOT_A_RECEIPT)]
    assert "UnknownWriterSchemaError" in bad[0].problem


@pytest.mark.integration
def test_a_latest_reader_sees_what_commits_after_it_was_created_and_nothing_before(
    receipts_topic: tuple[str, Producer], cluster: KafkaContext
) -> None:
    topic, producer = receipts_topic
    write(producer, topic, receipt_of("before"))
    # A transaction open while the reader is created: its receipt sits below the high watermark, above
    # the last stable offset. Committed later, it is a receipt written after the reader was made.
    writer = transactional_producer(cluster, unique("receipts-writer"))
    writer.begin_transaction()
    writer.produce(topic, key=b"open", value=default_codec().encode("outbox_receipt", receipt_of("open").to_record()))
    writer.flush(30)
    with ReceiptReader(cluster, topic=topic, start="latest") as reader:
        writer.commit_transaction(30)
        write(producer, topic, receipt_of("after"))
        found = reader.wait_for(["open", "after"], 30)
        assert set(found) == {"open", "after"}
        assert "before" not in reader.wait_for(["before"], 0)  # one partition: read in order, "before" comes first


@pytest.mark.integration
def test_a_group_resumes_after_what_it_handed_back_and_rereads_what_a_crash_held(
    receipts_topic: tuple[str, Producer], cluster: KafkaContext
) -> None:
    topic, producer = receipts_topic
    group = unique("receipts-group")
    write(producer, topic, receipt_of("d-1"))
    with ReceiptReader(cluster, topic=topic, group_id=group) as reader:
        assert set(reader.wait_for("d-1", 60)) == {"d-1"}
    # Closed normally: d-1 was handed back, so it is committed and not read again. (One partition, read
    # in order: once d-2 is read, d-1 would have been read before it.)
    write(producer, topic, receipt_of("d-2"))
    with pytest.raises(Boom), ReceiptReader(cluster, topic=topic, group_id=group) as reader:
        assert set(reader.wait_for("d-2", 60)) == {"d-2"}
        assert reader.wait_for("d-1", 0) == {}
        raise Boom  # the service dies with d-2 in hand
    with ReceiptReader(cluster, topic=topic, group_id=group) as reader:
        assert set(reader.wait_for("d-2", 60)) == {"d-2"}  # read again: at least once
        assert reader.wait_for("d-1", 0) == {}


def test_the_reader_takes_security_settings_through_and_refuses_its_own_keys() -> None:
    secret = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "s3cret-value"}
    config = reader_config(KafkaContext("broker:9093"), None, "latest", secret)
    assert {k: config[k] for k in secret} == secret
    assert config["isolation.level"] == "read_committed"
    for key, value in [
        ("group.id", "mine"),
        ("enable.auto.commit", True),
        ("auto.offset.reset", "earliest"),
        ("isolation.level", "read_uncommitted"),
        ("bootstrap.servers", "elsewhere:9092"),
    ]:
        with pytest.raises(ConfigError) as caught:
            reader_config(KafkaContext("broker:9093"), None, "earliest", {**secret, key: value})
        assert caught.value.key == key
        assert "s3cret-value" not in str(caught.value)

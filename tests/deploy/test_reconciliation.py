"""The outbox's reconciliation (deploy/eos_view/reconciliation.py): the rules over plain receipts and requests — what is
a repeated effect and what is only a repeated receipt, which requests lack a final receipt and which are in flight
or outside the receipts read — and, on the real broker, requests and receipts written to their topics and read
back through the windows that line up; and the real outbox sink's committed requests judged at once."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from demo.receiver import ReferenceReceiver
from deploy.eos_view.consumer_lag import read_lags, sink_committed
from deploy.eos_view.group_offsets import in_child
from deploy.eos_view.reconciliation import (
    GRACE_SECONDS,
    ReceiptSeen,
    RequestSeen,
    read_reconciliation,
    receipt_of,
    repeated_effects,
    without_final_receipt,
)
from deploy.kafka_windows import Deadline, Record, last_records
from deploy.kafka_windows import window_coverage as receipts_coverage
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.outbox import OutboxRequest, Receipt
from ikkai.contract.topics import OUTBOX_RECEIPTS, OUTBOX_REQUESTS
from tests.outbox_sink.conftest import SinkFactory, make_request, outbox_sink, receiver  # noqa: F401 - fixtures

GRACE_MS = int(GRACE_SECONDS * 1000)
NOW = 10_000_000


def receipt(decision: str, effect: str | None, key: str | None, delivered: bool = True) -> ReceiptSeen:
    return ReceiptSeen(decision, effect, "payments-api", delivered, key)


def request(decision: str, effect: str, ms: int, offset: int = 0) -> RequestSeen:
    return RequestSeen(decision, effect, "payments-api", ms, (OUTBOX_REQUESTS, 0, offset))


def test_a_repeated_delivered_receipt_with_the_same_key_is_no_repeated_effect() -> None:
    receipts = [receipt("d1", "hold", "k1"), receipt("d1", "hold", "k1"), receipt("d1", "hold", "k1", False)]
    assert repeated_effects(receipts) == ([], [], 1)  # at least once: one repeat receipt, one application


def test_an_effect_delivered_under_two_keys_is_repeated_and_a_key_of_two_effects_is_shared() -> None:
    receipts = [
        receipt("d1", "hold", "k1"), receipt("d1", "hold", "k2"),  # the API saw two keys: applied twice
        receipt("d2", "hold", "k3", delivered=False), receipt("d2", "hold", "k4"),  # one delivered key only
        receipt("d3", "hold", "k5"), receipt("d3", "notify", "k5"),  # one key, two effects: one never applied
        receipt("d4", None, None), receipt("d4", None, None),  # before receipts carried a key: not judged
    ]  # fmt: skip
    repeated, shared, repeats = repeated_effects(receipts)
    assert (repeated, shared, repeats) == ([("d1", "hold")], ["k5"], 1)


def test_an_explicit_effect_and_a_default_effect_of_one_name_are_two_effects() -> None:
    """The explicit effect ``payments-api/ok/1`` and target ``payments-api`` + path ``/ok/1`` share a name and have two
    keys: two effects, each applied once, neither repeated; a receipt of one is no receipt of the other (receipt v3
    says which; requests say it by naming an effect or not). Mutation: the key without the kind -> the pair is
    "repeated" and the default request counts as receipted."""
    name = "payments-api/ok/1"
    explicit, default = (ReceiptSeen("d1", name, "payments-api", True, key, kind) for key, kind in
                         (("k-explicit", "EXPLICIT"), ("k-default", "DEFAULT")))  # fmt: skip
    assert repeated_effects([explicit, default]) == ([], [], 0)
    old = NOW - GRACE_MS - 1
    asked_explicit = RequestSeen("d1", name, "payments-api", old, (OUTBOX_REQUESTS, 0, 0), "EXPLICIT")
    asked_default = RequestSeen("d1", name, "payments-api", old, (OUTBOX_REQUESTS, 0, 1), "DEFAULT")
    missing, judged, _, _ = without_final_receipt([asked_explicit, asked_default], [explicit], now_ms=NOW,
                                                  covered_from_ms=0)  # fmt: skip
    assert (missing, judged) == ([asked_default], 2)


def test_requests_without_a_final_receipt_are_judged_only_past_the_grace_and_inside_the_receipts_read() -> None:
    old = NOW - GRACE_MS - 1
    requests = [
        request("d1", "hold", old, 0),  # delivered
        request("d2", "hold", old, 1),  # dead-lettered: a final receipt too
        request("d3", "hold", old, 2),  # no receipt: missing
        request("d3", "notify", old, 3),  # another effect of d3, receipted: not missing
        request("d4", "hold", NOW - GRACE_MS + 1, 4),  # in flight
        request("d5", "hold", 1_000, 5),  # older than where the receipts read starts: not judged
        request("d6", "payments-api/x", old, 6),  # receipted before receipts named their effect: by the target
    ]
    receipts = [receipt("d1", "hold", "k1"), receipt("d2", "hold", "k2", delivered=False),
                receipt("d3", "notify", "k3"), receipt("d6", None, None)]  # fmt: skip
    missing, judged, in_flight, not_judged = without_final_receipt(
        requests, receipts, now_ms=NOW, covered_from_ms=5_000
    )
    assert [m.where[2] for m in missing] == [2]
    assert (judged, in_flight, not_judged) == (5, 1, 1)


def test_a_request_below_the_sinks_committed_offset_is_judged_however_young() -> None:
    """The sink flushes a request's receipt before it commits the request's offset: below that offset the outcome
    is due now, not after the grace. Mutation: ``delivered`` ignored -> all three are in flight, nothing judged."""
    young = NOW - 1_000
    requests = [request("d1", "hold", young, 0), request("d2", "hold", young, 1), request("d3", "hold", young, 2)]
    missing, judged, in_flight, _ = without_final_receipt(
        requests, [receipt("d1", "hold", "k1")], now_ms=NOW, covered_from_ms=0, delivered={(OUTBOX_REQUESTS, 0): 2}
    )
    assert ([m.where[2] for m in missing], judged, in_flight) == ([1], 2, 1)  # 2 is beyond the committed offset


def test_the_receipts_read_covers_from_the_latest_first_timestamp_of_a_cut_partition() -> None:
    def at(partition: int, ms: int) -> Record:
        return Record(OUTBOX_RECEIPTS, partition, ms, ms, None, None)

    read = [at(0, 500), at(0, 700), at(1, 900), at(1, 950), at(2, 100)]
    assert receipts_coverage(read, cut=[]) == 0
    assert receipts_coverage(read, cut=[(OUTBOX_RECEIPTS, 0), (OUTBOX_RECEIPTS, 1)]) == 900


# On the real broker.


@pytest.mark.integration
def test_the_reconciliation_reads_requests_and_receipts_in_windows_that_line_up(cluster: KafkaContext) -> None:
    kafka = cluster
    suffix = uuid.uuid4().hex[:10]
    requests_topic, receipts_topic = f"{OUTBOX_REQUESTS}.{suffix}", f"{OUTBOX_RECEIPTS}.{suffix}"
    admin = AdminClient(kafka.client_config())
    for topic in (requests_topic, receipts_topic):
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    codec = default_codec()
    producer = Producer(kafka.producer_config())
    old = int(time.time() * 1000) - 5 * GRACE_MS

    def asked(decision: str, ms: int) -> OutboxRequest:
        made = OutboxRequest(decision, f"pay-{decision}", "payments-api", "/holds", b"{}", 0, effect="hold")
        producer.produce(requests_topic, key=made.key, value=codec.encode("outbox_request", made.to_record()),
                         timestamp=ms)  # fmt: skip
        return made

    def receipted(made: OutboxRequest, key: str, outcome: str = "DELIVERED") -> None:
        done = Receipt(made.decision_id, made.key, made.target, outcome, 201, 1, old, old, None, None,  # type: ignore[arg-type]
                       made.effect, key)  # fmt: skip
        producer.produce(receipts_topic, key=made.decision_id, value=codec.encode("outbox_receipt", done.to_record()))

    delivered, repeated, lost = asked("d-ok", old), asked("d-twice", old), asked("d-lost", old)
    asked("d-new", int(time.time() * 1000))  # in flight: no receipt yet, never missing
    receipted(delivered, delivered.idempotency_key)
    receipted(delivered, delivered.idempotency_key)  # at least once: a repeat receipt, no repeated effect
    receipted(repeated, repeated.idempotency_key)
    receipted(repeated, "a-key-derived-another-way")
    producer.produce(requests_topic, value=b"not avro", timestamp=old)
    producer.flush(30)
    partitions_of = {requests_topic: [0, 1], receipts_topic: [0, 1]}
    found = read_reconciliation(kafka, admin, partitions_of, codec, int(time.time() * 1000), Deadline(30),
                                requests_topic=requests_topic, receipts_topic=receipts_topic)  # fmt: skip
    assert found.problem is None
    assert (found.requests, found.receipts, found.undecodable) == (4, 4, 1)
    assert found.repeated == ((repeated.decision_id, "hold"),) and found.repeat_receipts == 1
    assert [m.decision_id for m in found.missing] == [lost.decision_id]
    assert (found.judged, found.in_flight, found.not_judged) == (3, 1, 0)


@pytest.mark.integration
def test_with_the_real_outbox_sink_every_request_it_committed_is_judged_and_a_lost_receipt_shows_at_once(
    outbox_sink: SinkFactory,  # noqa: F811 - the fixture imported above
    receiver: ReferenceReceiver,  # noqa: F811 - the fixture imported above
) -> None:
    """The real sink delivers six requests and commits their offsets; then every request is judged although none is
    60 s old, and a receipt deleted from its topic shows as a request without a final receipt in the same sample,
    not 60 s later."""
    sink = outbox_sink(partitions=1, backoff_initial_ms=200, backoff_max_ms=2_000, retry_max_duration_ms=120_000)
    requests = [make_request(i, f"pay-{i}") for i in range(6)]
    sink.emit(requests)
    assert len(sink.receipts().wait_for([r.decision_id for r in requests], 120)) == len(requests)
    kafka = KafkaContext.recorded(sink.endpoints)
    admin = AdminClient(kafka.client_config())
    partitions_of = {sink.requests_topic: [0], sink.receipts_topic: [0]}
    groups = in_child(kafka.client_config())
    give_up = time.monotonic() + 120
    while True:  # the worker commits the sink's offsets every second (the stack's offset.flush.interval.ms)
        lags = read_lags(kafka, admin, partitions_of, {}, Deadline(30), groups, max_groups=10_000)
        mine = [s for s in lags.sinks if s.name == sink.name]
        if mine and mine[0].total == 0:
            break  # caught up: lag 0 on a transactional input
        assert time.monotonic() < give_up, f"the sink's group never caught up: {mine}"
        time.sleep(0.5)
    first, _ = last_records(kafka, {(sink.receipts_topic, 0): (0, 1)}, Deadline(30))
    lost = receipt_of(first[0], default_codec()).decision_id
    # The first receipt lost: every record of the receipts partition before the second is deleted.
    deleted = admin.delete_records([TopicPartition(sink.receipts_topic, 0, 1)])
    assert all(future.result(30) for future in deleted.values())

    found = read_reconciliation(
        kafka, admin, partitions_of, default_codec(), int(time.time() * 1000), Deadline(60),
        requests_topic=sink.requests_topic, receipts_topic=sink.receipts_topic, delivered=sink_committed(lags),
    )  # fmt: skip
    assert found.problem is None, found.problem
    assert (found.requests, found.judged, found.in_flight, found.not_judged) == (6, 6, 0, 0)
    assert [m.decision_id for m in found.missing] == [lost]

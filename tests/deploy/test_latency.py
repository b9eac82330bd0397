"""The latency picture (deploy/eos_view/latency.py): percentiles per minute over plain points, which decision or receipt
counts and against which record; and, on the real broker, events, decisions, requests and receipts written with
known timestamps and read back through the health view's windows (read_committed)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.eos_view.event_decisions import read_event_decisions
from deploy.eos_view.latency import Bucket, buckets, decision_to_receipt, percentile, produced_to_decision
from deploy.eos_view.reconciliation import read_reconciliation
from deploy.kafka_windows import Deadline
from deploy.serve.page.charts import latency_chart
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker
from ikkai.contract.outbox import OutboxRequest, Receipt

MINUTE = 60_000
NOW = 100 * MINUTE + 30_000  # half a minute into minute 100


def test_percentiles_are_by_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50, 99, 100)
    assert (percentile([7], 50), percentile([7], 99), percentile([], 50)) == (7, 7, None)
    assert (percentile([3, 1, 2], 50), percentile([3, 1, 2], 99)) == (2, 3)


def test_points_are_filed_under_the_minute_they_were_written_and_older_ones_left_out() -> None:
    points = [
        (NOW, 10), (NOW - 1, 30), (100 * MINUTE, 20),  # this minute (100): 10, 20, 30
        (99 * MINUTE + 59_999, 500),  # the minute before
        (86 * MINUTE, 1), (NOW + MINUTE, 1),  # before the 15 minutes kept, and after now
    ]  # fmt: skip
    found = buckets(points, NOW, bucket_seconds=60, count=15)
    assert len(found) == 15 and found[0].start_ms == 86 * MINUTE and found[-1].start_ms == 100 * MINUTE
    assert found[-1] == Bucket(100 * MINUTE, 3, 20, 30)
    assert found[-2] == Bucket(99 * MINUTE, 1, 500, 500)
    assert found[0] == Bucket(86 * MINUTE, 1, 1, 1)
    assert all(b.count == 0 and b.p50_ms is None for b in found[1:-2])
    assert sum(b.count for b in buckets(points, NOW, count=14)) == 4  # minute 86 falls out


def test_a_decision_counts_against_the_event_it_names() -> None:
    events = {(0, 5): 1_000, (1, 5): 2_000}
    decisions = [((0, 5), 1_400), ((1, 5), 2_050), ((0, 9), 3_000)]  # the last names an event not read
    assert produced_to_decision(events, decisions) == [(1_400, 400), (2_050, 50)]


def test_the_first_receipt_of_each_effect_counts_against_its_decisions_request() -> None:
    requests = [("d1", 1_000), ("d1", 1_002), ("d2", 5_000)]  # d1 has two effects' requests
    receipts = [("d1", "hold", 1_500), ("d1", "hold", 9_000), ("d1", "notify", 1_700), ("d3", "hold", 10)]
    # a repeat of hold (at least once) does not count; d3 has no request read
    assert decision_to_receipt(requests, receipts) == [(1_500, 500), (1_700, 700)]


def test_the_chart_is_svg_that_fetches_nothing() -> None:
    found = buckets([(NOW, 1_500), (NOW - MINUTE, 250)], NOW)
    svg = latency_chart(found, buckets([], NOW), NOW)
    assert svg.startswith("<?xml") and "produced → decision p99" in svg and "decision → receipt p50" in svg
    assert 'href="http' not in svg and 'src="http' not in svg  # pygal's tooltip script is off: nothing to fetch


@pytest.mark.integration
def test_latencies_read_back_from_the_health_views_windows(cluster: KafkaContext) -> None:
    kafka = cluster
    suffix = uuid.uuid4().hex[:10]
    events_topic, decisions_topic = f"events.{suffix}", f"decisions.{suffix}"
    requests_topic, receipts_topic = f"outbox.requests.{suffix}", f"outbox.receipts.{suffix}"
    admin = AdminClient(kafka.client_config())
    for topic in (events_topic, decisions_topic, requests_topic, receipts_topic):
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    codec = default_codec()
    producer = Producer(kafka.producer_config())
    start = (int(time.time() * 1000) // MINUTE - 3) * MINUTE  # the start of a minute: every decision in it
    for offset in range(4):  # events at start + offset s, each decided offset * 100 ms + 200 ms later
        producer.produce(events_topic, key=f"p-{offset}", value=b"event", timestamp=start + offset * 1000)
    for offset in range(4):
        value = {"decision_id": f"d-{offset}", "payment_id": f"p-{offset}", "event_id": f"e-{offset}",
                 "model_version": "m@1", "score": 0.1, "action": "approve", "features": {},
                 "features_as_of": None, "event_time": 0, "input_topic": events_topic, "input_partition": 0,
                 "input_offset": offset}  # fmt: skip
        producer.produce(decisions_topic, key=f"p-{offset}", value=codec.encode("fraud_decision", value),
                         timestamp=start + offset * 1000 + offset * 100 + 200)  # fmt: skip
    for i, delay in enumerate((300, 2_000)):  # two requests, receipted 300 ms and 2 s later; the second twice
        made = OutboxRequest(f"d-{i}", f"pay-{i}", "payments-api", "/holds", b"{}", 0, effect="hold")
        producer.produce(requests_topic, key=made.key, value=codec.encode("outbox_request", made.to_record()),
                         timestamp=start + i * 1000)  # fmt: skip
        done = Receipt(made.decision_id, made.key, made.target, "DELIVERED", 201, 1, start, start, None, None,  # type: ignore[arg-type]
                       made.effect, made.idempotency_key)  # fmt: skip
        for again in range(1 + i):
            producer.produce(receipts_topic, key=made.decision_id, value=codec.encode("outbox_receipt",
                             done.to_record()), timestamp=start + i * 1000 + delay + again * MINUTE)  # fmt: skip
    producer.flush(30)
    markers = [CommitMarker("ikkai", "infer", 0, 1, 1, 4, events_topic, {0: 4}, output_topics=(decisions_topic,))]
    partitions_of = {t: [0] for t in (events_topic, decisions_topic, requests_topic, receipts_topic)}
    decided = read_event_decisions(kafka, admin, partitions_of, markers, codec, Deadline(30), decisions_topic)
    assert decided.problem is None, decided.problem
    assert [delay for _, delay in decided.delays] == [200, 300, 400, 500]
    receipted = read_reconciliation(kafka, admin, partitions_of, codec, int(time.time() * 1000), Deadline(30),
                                    requests_topic=requests_topic, receipts_topic=receipts_topic)  # fmt: skip
    assert receipted.problem is None, receipted.problem
    assert [delay for _, delay in receipted.delays] == [300, 2_000]  # the repeat a minute later does not count
    minute = buckets(decided.delays, start + 30_000)[-1]
    assert (minute.count, minute.p50_ms, minute.p99_ms) == (4, 300, 500)

"""A master-data outage delays the enrich job on the real stack, it never rejects input (docs/architecture.md, rule 7).

- A publish in flight (an open transaction on a master-data topic, appended before the events
  were ingested) holds the batch; once it commits, the events are enriched with it.
- A master-data topic that cannot be read stops the job after ``--master-data-timeout`` with
  nothing written: no event, no dead letter. A later run resumes from the checkpoint.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from demo.payments_simulation import generate_profiles
from demo.raw_payments import mixed_stream, produce_lines
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from spark_jobs.enrich.master_data import (
    MerchantProfile,
    encode_profile,
    ensure_master_topics,
    publish_profiles,
)
from stack.kit.topic_io import by_partition, create_topic, flat, unique
from tests.spark_jobs.enrich_process import EnrichProcess, EnrichTopics

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
SEED = 11


def topics_for(cluster: KafkaContext) -> EnrichTopics:
    name = unique("outage")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"masterdata.merchants.{name}",
                          f"masterdata.customers.{name}")  # fmt: skip
    for topic in (topics.input, topics.events, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)
    return topics


def test_a_publish_in_flight_holds_the_batch_and_is_then_used(cluster: KafkaContext, tmp_path: Path) -> None:
    stream = mixed_stream(SEED, partitions=PARTITIONS)
    topics = topics_for(cluster)
    merchants, customers = generate_profiles(stream.world, SEED)
    publish_profiles(cluster, merchants, customers, merchants_topic=topics.merchants,
                     customers_topic=topics.customers, transactional_id=unique("test.masterdata"))  # fmt: skip
    # A new version for every merchant, valid from before all events, appended now but not yet committed.
    start = min(p.valid_from for p in merchants)
    in_flight = [MerchantProfile(p.merchant_id, start + 1, p.name, p.country, "watchlist")
                 for p in merchants if p.valid_from == start]  # fmt: skip
    publisher = Producer({
        "bootstrap.servers": cluster.bootstrap_servers, "transactional.id": unique("test.slow.publisher"),
        "enable.idempotence": True, "acks": "all", "transaction.timeout.ms": 600_000,
    })  # fmt: skip
    publisher.init_transactions(60)
    publisher.begin_transaction()
    for profile in in_flight:
        key, value = encode_profile(profile)
        publisher.produce(topics.merchants, key=key, value=value)
    assert publisher.flush(60) == 0
    time.sleep(0.05)  # the events below are ingested strictly after the versions were appended
    produce_lines(cluster, topics.input, stream.lines)

    job = EnrichProcess(cluster, topics, tmp_path, unique("held"), "--master-data-timeout", "600")
    try:
        deadline = time.monotonic() + 300
        while not any("holding the batch" in line for line in job.log):
            assert job.process.poll() is None, job.tail()
            assert time.monotonic() < deadline, job.tail()
            time.sleep(0.5)
        time.sleep(2)
        assert flat(by_partition(cluster, topics.events)) == [] and flat(by_partition(cluster, topics.dlq)) == []
        publisher.commit_transaction(60)
        assert job.wait() == 0, job.tail()
    finally:
        job.kill()
    codec = default_codec()
    events = [codec.decode("payment_event", v) for _, v in flat(by_partition(cluster, topics.events))]
    assert Counter(e["event_id"] for e in events) == Counter(stream.expected_event_ids())
    in_force = [e for e in events if e["merchant_profile_as_of"] == start + 1]
    assert in_force and all(e["merchant_risk_tier"] == "watchlist" for e in in_force)
    later = {p.merchant_id: p.valid_from for p in merchants if p.valid_from != start}
    assert all(e["merchant_id"] in later and e["event_time"] >= later[e["merchant_id"]]
               for e in events if e not in in_force)  # fmt: skip  # only a newer valid_from beats it


def test_unreadable_master_data_stops_the_job_and_writes_nothing(cluster: KafkaContext, tmp_path: Path) -> None:
    stream = mixed_stream(SEED, partitions=PARTITIONS)
    topics = topics_for(cluster)
    ensure_master_topics(cluster, merchants_topic=topics.merchants, customers_topic=f"{topics.customers}.other")
    produce_lines(cluster, topics.input, stream.lines)  # the customers topic the job reads does not exist
    job = EnrichProcess(cluster, topics, tmp_path, unique("outage"), "--master-data-timeout", "3")
    assert job.wait() != 0
    log = "".join(job.log)
    assert "master data" in log and "nothing of this batch was written" in log, job.tail()
    assert flat(by_partition(cluster, topics.events)) == [] and flat(by_partition(cluster, topics.dlq)) == []

"""Merchant and customer master data: versioned profiles on compacted Kafka topics.

``masterdata.merchants`` and ``masterdata.customers`` hold *versions*, not current values: each
record is one profile version (Avro ``merchant_profile`` / ``customer_profile``) with the business
time ``valid_from`` from which it applies. The Kafka key is ``<id>@<valid_from>@<digest>`` (digest =
the first 12 hex digits of the sha-256 of the value bytes), so

- compaction keeps every distinct version (different keys), and republishing an identical
  version is a no-op (same key, same value);
- a correction of a version (same id and valid_from, new content) is a new record with a new
  key; it does not overwrite the old one, so an event enriched before the correction was
  published is enriched the same way on replay (the enrich job's as-of join is bitemporal:
  ``valid_from <= event_time`` and the version's publish time <= the event's ingest time).

The topics are created compacted with ``message.timestamp.type=LogAppendTime``: a version's
Kafka timestamp is the broker's append time, the *publish time* the bitemporal join compares
with the ingest record's timestamp, and it cannot be set by a publisher's clock.

``publish_profiles`` writes with a transactional producer (docs/architecture.md, rule 3:
idempotent, acks=all, stable ``transactional.id``), all versions of one call in one transaction,
so the enrich job (read_committed) sees a publish completely or not at all. (The demo's
simulated world derives its versions in ``demo.payments_simulation.generate_profiles``.)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ikkai.contract import kafka, topics
from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.wire_format import environment_codec

MERCHANTS_TOPIC = topics.MASTERDATA_MERCHANTS
CUSTOMERS_TOPIC = topics.MASTERDATA_CUSTOMERS
MERCHANT_SCHEMA = "merchant_profile"
CUSTOMER_SCHEMA = "customer_profile"
RISK_TIERS = ("low", "medium", "high")
SEGMENTS = ("retail", "premium", "business")
TOPIC_CONFIG = {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}
DEFAULT_TRANSACTIONAL_ID = "ikkai.masterdata.publisher"


@dataclass(frozen=True)
class MerchantProfile:
    merchant_id: str
    valid_from: int  # epoch millis, business time
    name: str
    country: str
    risk_tier: str


@dataclass(frozen=True)
class CustomerProfile:
    customer_id: str
    valid_from: int
    segment: str
    home_country: str


Profile = MerchantProfile | CustomerProfile


def profile_key(entity_id: str, valid_from: int, value: bytes) -> bytes:
    """``<id>@<valid_from>@<digest of the value>``: one key per distinct version (see the module docstring)."""
    return f"{entity_id}@{valid_from}@{hashlib.sha256(value).hexdigest()[:12]}".encode()


def encode_profile(profile: Profile, codec: RecordCodec | None = None) -> tuple[bytes, bytes]:
    """(key, value) of one version, the value single-object Avro."""
    codec = codec or environment_codec()
    if isinstance(profile, MerchantProfile):
        value = codec.encode(MERCHANT_SCHEMA, asdict(profile))
        return profile_key(profile.merchant_id, profile.valid_from, value), value
    value = codec.encode(CUSTOMER_SCHEMA, asdict(profile))
    return profile_key(profile.customer_id, profile.valid_from, value), value


def ensure_master_topics(
    cluster: KafkaContext, *, merchants_topic: str = MERCHANTS_TOPIC, customers_topic: str = CUSTOMERS_TOPIC
) -> None:
    """Create missing master-data topics: one partition, compacted, LogAppendTime."""
    kafka.ensure_topics(cluster, (merchants_topic, customers_topic), 1, config=TOPIC_CONFIG)


def publish_profiles(
    cluster: KafkaContext,
    merchants: Iterable[MerchantProfile] = (),
    customers: Iterable[CustomerProfile] = (),
    *,
    merchants_topic: str = MERCHANTS_TOPIC,
    customers_topic: str = CUSTOMERS_TOPIC,
    transactional_id: str = DEFAULT_TRANSACTIONAL_ID,
    create_topics: bool = True,
    logger: logging.Logger | None = None,
) -> int:
    """Publish profile versions in one Kafka transaction; returns how many records were written. ``logger``:
    where librdkafka's lines go (default: its own, stderr)."""
    from confluent_kafka import Producer

    if create_topics:
        ensure_master_topics(cluster, merchants_topic=merchants_topic, customers_topic=customers_topic)
    codec = environment_codec()
    records = [(merchants_topic, *encode_profile(p, codec)) for p in merchants]
    records += [(customers_topic, *encode_profile(p, codec)) for p in customers]
    settings: dict[str, Any] = {"transactional.id": transactional_id, "linger.ms": 5}
    if logger is not None:
        settings["logger"] = logger
    producer = Producer(cluster.producer_config(**settings))
    producer.init_transactions(60)
    producer.begin_transaction()
    try:
        for topic, key, value in records:
            while True:
                try:
                    producer.produce(topic, key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.commit_transaction(60)
    except Exception:
        producer.abort_transaction(60)
        raise
    return len(records)


def decode_profile(schema: str, value: bytes, codec: RecordCodec | None = None) -> dict[str, Any]:
    return (codec or environment_codec()).decode(schema, value)


def profiles_as_records(profiles: Sequence[Profile]) -> list[Mapping[str, Any]]:
    return [asdict(p) for p in profiles]

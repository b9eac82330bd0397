"""Our murmur2 partitioner puts keys where Kafka's default partitioner does."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import Producer

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import (
    kafka_partition,
    kafka_partitions,
    murmur2,
    spark_hash_int,
    spark_partition_routes,
)
from stack.kit.topic_io import create_topic, unique


def test_murmur2_known_values() -> None:
    # From Kafka's UtilsTest.testMurmur2 (Java ints, here as unsigned).
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}  # fmt: skip
    for data, expected in cases.items():
        assert murmur2(data) == expected & 0xFFFFFFFF


def test_vectorized_partitions_equal_the_scalar_ones() -> None:
    rng = random.Random(7)  # noqa: S311 - test keys, not cryptography
    keys = [f"pay-{i}".encode() for i in range(500)] + [rng.randbytes(rng.randrange(0, 40)) for _ in range(500)]
    for partitions in (1, 2, 3, 5, 12):
        assert kafka_partitions(keys, partitions).tolist() == [kafka_partition(k, partitions) for k in keys]
    assert kafka_partitions([], 3).tolist() == []


def test_spark_hash_of_ints_and_the_routes_it_gives() -> None:
    # SELECT hash(CAST(id AS INT)) FROM range(5), Spark 4.3
    assert [spark_hash_int(i) for i in range(5)] == [933211791, -559580957, 1765031574, -1823081949, -397064898]
    for partitions in (1, 2, 3, 4, 7, 64):
        routes = spark_partition_routes(partitions)
        assert [spark_hash_int(v) % partitions for v in routes] == list(range(partitions))


@pytest.mark.integration
def test_matches_librdkafkas_murmur2_partitioner(cluster: KafkaContext) -> None:
    topic = create_topic(cluster, unique("test.partitioning"), partitions=5)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "partitioner": "murmur2_random"})
    landed: dict[bytes, int] = {}
    for i in range(200):
        key = f"pay-{i}".encode()
        producer.produce(
            topic, value=b"x", key=key, on_delivery=lambda err, msg: landed.__setitem__(msg.key(), msg.partition())
        )
    producer.flush(30)
    assert len(landed) == 200
    assert all(kafka_partition(key, 5) == partition for key, partition in landed.items())

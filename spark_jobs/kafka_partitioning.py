"""Which Kafka partition a key belongs to: Kafka's default partitioner (murmur2), in Python.

The transactional sink writes Spark partition p to Kafka partition p of every output topic,
so each Kafka partition has exactly one writer per batch and a deterministic order. Rows are
routed to Spark partition ``kafka_partition(key, n)``, the same partition the Java client (and
librdkafka's ``murmur2_random`` partitioner) would pick, so keys land where any other Kafka
client would put them.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as an unsigned 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def kafka_partition(key: bytes, partitions: int) -> int:
    """``toPositive(murmur2(key)) % partitions``, as Kafka's default partitioner computes it."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions

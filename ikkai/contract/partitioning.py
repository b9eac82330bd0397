"""Which Kafka partition a key belongs to: Kafka's default partitioner (murmur2), in Python.

The transactional sink's routed write sends Spark partition p to Kafka partition p of every
output topic, so each Kafka partition has exactly one writer per batch and a deterministic
order; its in-place write uses this to count records outside their key's partition. Rows are
routed to Spark partition ``kafka_partition(key, n)``, the same partition the Java client (and
librdkafka's ``murmur2_random`` partitioner) would pick, so keys land where any other Kafka
client would put them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy only where keys are routed in bulk (the jobs): the light client installs none
    import numpy as np

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


def kafka_partitions(keys: Sequence[bytes], partitions: int) -> np.ndarray:
    """``kafka_partition`` of every key at once (numpy over keys of equal length), as int32.

    The sink routes every output row by its key; per row in Python that is ~5 µs a key, here it
    is a few vectorized passes per distinct key length.
    """
    import numpy as np

    result = np.empty(len(keys), dtype=np.int32)
    by_length: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(index)
    for length, indexes in by_length.items():
        joined = b"".join(keys[i] for i in indexes)
        data = np.frombuffer(joined, dtype=np.uint8).reshape(len(indexes), length)
        result[indexes] = (_murmur2_equal_length(data) & 0x7FFFFFFF) % partitions
    return result


def _murmur2_equal_length(data: np.ndarray) -> np.ndarray:
    """``murmur2`` of each row of a (keys, length) uint8 array; uint32 arithmetic wraps like Java's int."""
    import numpy as np

    rows, length = data.shape
    m = np.uint32(_M)
    with np.errstate(over="ignore"):
        h = np.full(rows, (0x9747B28C ^ length) & _MASK, dtype=np.uint32)
        whole = length - length % 4
        if whole:
            words = np.ascontiguousarray(data[:, :whole]).view("<u4")
            for i in range(words.shape[1]):
                k = words[:, i] * m
                k ^= k >> np.uint32(24)
                k *= m
                h = (h * m) ^ k
        rest = length % 4
        if rest == 3:
            h ^= data[:, whole + 2].astype(np.uint32) << np.uint32(16)
        if rest >= 2:
            h ^= data[:, whole + 1].astype(np.uint32) << np.uint32(8)
        if rest >= 1:
            h ^= data[:, whole].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    return h


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash(<int column>)`` (``Murmur3_x86_32.hashInt`` with seed 42), a signed 32-bit int."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _MASK

    k1 = rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the length in bytes
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def spark_partition_routes(partitions: int) -> tuple[int, ...]:
    """``routes[p]``: the smallest int that Spark's ``repartition(partitions, <int column>)`` puts in partition p.

    Spark's hash partitioning sends a row to ``pmod(hash(col), partitions)``. A column holding
    ``routes[kafka_partition(key)]`` therefore lands every row in the Spark partition numbered
    like its Kafka partition. (The sink checks on every row that it did.)
    """
    routes: dict[int, int] = {}
    value = 0
    while len(routes) < partitions:
        routes.setdefault(spark_hash_int(value) % partitions, value)  # Python's % is pmod for a positive divisor
        value += 1
    return tuple(routes[p] for p in range(partitions))

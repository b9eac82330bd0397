"""Which broker coordinates a transactional id: Kafka's own formula, checked against values Java computed."""

from __future__ import annotations

import pytest

from stack.kit.leaders import java_string_hash, transaction_state_partition

# (text, String.hashCode(), Utils.abs(hashCode) % 50), printed by Java 17.
JAVA = [
    ("hello", 99162322, 22),
    ("ikkai.chaos.0", 2096886213, 13),
    ("ikkai.infer.1", -991932652, 2),
    ("polygenelubricants", -(2**31), 0),  # Integer.MIN_VALUE: Kafka's Utils.abs makes it 0, not negative
    ("é€😀", 16752006, 6),  # beyond Latin-1 and beyond the BMP: hashed as UTF-16 code units
    ("", 0, 0),
]


@pytest.mark.parametrize(("text", "hash_code", "partition"), JAVA)
def test_the_hash_and_partition_are_javas(text: str, hash_code: int, partition: int) -> None:
    assert java_string_hash(text) == hash_code
    assert transaction_state_partition(text, 50) == partition


def test_partitions_spread_over_the_transaction_state_log() -> None:
    partitions = {transaction_state_partition(f"ikkai.infer.{p}", 50) for p in range(200)}
    assert partitions <= set(range(50)) and len(partitions) > 25

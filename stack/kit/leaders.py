"""Which broker does what: partition leaders, transaction coordinators and replicas out of sync.

Broker-failure tests kill a broker on purpose: the one leading a job's output partition, or the
one coordinating a writer's transactions. librdkafka's admin client has no FindCoordinator call,
so the coordinator is computed as Kafka does (``transaction_state_partition``, a pure function)
and looked up as the leader of that partition of ``__transaction_state``.
"""

from __future__ import annotations

import logging

from confluent_kafka.admin import AdminClient

from ikkai.contract.kafka import KafkaContext
from stack.errors import StackError

TRANSACTION_STATE_TOPIC = "__transaction_state"

_INT_RANGE = 1 << 32
_INT_MIN = -(1 << 31)

_quiet = logging.getLogger("ikkai.leaders")  # librdkafka reports every refused connection to a dead broker
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in 32-bit ints."""
    units = text.encode("utf-16-be")
    value = 0
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i : i + 2], "big")) % _INT_RANGE
    return value - _INT_RANGE if value > -_INT_MIN - 1 else value


def transaction_state_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition that holds ``transactional_id``; its leader is the coordinator.

    Kafka's ``TransactionStateManager.partitionFor``: ``Utils.abs(transactionalId.hashCode) % partitions``,
    where ``Utils.abs(Integer.MIN_VALUE)`` is 0, not ``Integer.MIN_VALUE``.
    """
    value = java_string_hash(transactional_id)
    return (0 if value == _INT_MIN else abs(value)) % partitions


def _admin(cluster: KafkaContext) -> AdminClient:
    return AdminClient(cluster.client_config(), logger=_quiet)


def partition_leaders(cluster: KafkaContext, topic: str, timeout: float = 10) -> dict[int, int]:
    """Leader node id of each partition of ``topic`` (-1 while a partition has none)."""
    metadata = _admin(cluster).list_topics(topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is not None:
        raise StackError(topic, f"no metadata for the topic ({metadata.error if metadata else 'unknown'})",
                         fix="create it first, or check the name")  # fmt: skip
    return {partition: p.leader for partition, p in metadata.partitions.items()}


def transaction_coordinator(cluster: KafkaContext, transactional_id: str, timeout: float = 10) -> int:
    """Node id of the broker coordinating ``transactional_id``'s transactions (-1 while there is none)."""
    leaders = partition_leaders(cluster, TRANSACTION_STATE_TOPIC, timeout)
    return leaders[transaction_state_partition(transactional_id, len(leaders))]


def under_replicated(cluster: KafkaContext, timeout: float = 10) -> list[str]:
    """``topic/partition`` of every partition with fewer in-sync replicas than replicas, or no leader."""
    topics = _admin(cluster).list_topics(timeout=timeout).topics
    return sorted(
        f"{name}/{partition}"
        for name, topic in topics.items()
        for partition, p in topic.partitions.items()
        if p.leader < 0 or len(p.isrs) < len(p.replicas)
    )

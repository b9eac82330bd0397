"""How every ikkai client talks to Kafka: the producer and consumer settings of rule 3, and topic creation.

Rule 3 (docs/architecture.md): producers are idempotent (``enable.idempotence``, ``acks=all``,
at most 5 requests in flight, so retries can neither duplicate nor reorder), and consumers of
processed topics read committed. Every producer and consumer ikkai builds starts from these.
Topics are never auto-created: ``ensure_topics`` creates the missing ones with the brokers'
default replication factor (-1), so the same code makes one replica on the embedded stack and
three on a three-broker cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ikkai.errors import ConfigError

IDEMPOTENT_PRODUCER: Mapping[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
}
BROKERS_DEFAULT = -1  # replication factor: the brokers' default.replication.factor


READ_COMMITTED: Mapping[str, Any] = {"isolation.level": "read_committed"}


def consumer_config(bootstrap: str, group_id: str, **extra: Any) -> dict[str, Any]:
    """A read_committed consumer's settings; ``extra`` adds to them (offsets, EOF events), never weakens them."""
    return {"bootstrap.servers": bootstrap, "group.id": group_id, **extra, **READ_COMMITTED}


def producer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """An idempotent producer's settings; ``extra`` adds to them (a transactional.id, linger.ms), never weakens them."""
    return {"bootstrap.servers": bootstrap, **extra, **IDEMPOTENT_PRODUCER}


def ensure_topics(
    bootstrap: str, names: Iterable[str], partitions: int, *, config: Mapping[str, str] | None = None
) -> list[str]:
    """Create the missing ones with ``partitions`` partitions and ``config``; the names created.

    One metadata request for all of them; a topic someone else created meanwhile is as good as ours.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    missing = [n for n in dict.fromkeys(names) if n not in existing or existing[n].error is not None]
    wanted = [NewTopic(n, partitions, BROKERS_DEFAULT, config=dict(config or {})) for n in missing]
    for name, future in admin.create_topics(wanted).items() if wanted else []:
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConfigError("kafka", name, f"cannot create the topic: {exc}") from exc
    return missing

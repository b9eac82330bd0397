"""The outbox sink's Kafka Connect config, built from typed settings (pure), and its topics.

This is what the control plane's bundle renders (connectors/bundles/outbox-sink); tests and
the benchmark use it directly. Auth values are config-provider placeholders
(``${file:/etc/ikkai/secrets.properties:payments_token}``), resolved by the worker, so the
secret never appears in the connector config that Connect stores and shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ikkai.contract import kafka
from ikkai.errors import ConfigError
from outbox_sink.contract import DLQ_TOPIC, RECEIPTS_TOPIC, REQUESTS_TOPIC

CONNECTOR_CLASS = "dev.ikkai.outbox.OutboxSinkConnector"
SOURCE = "outbox sink config"


@dataclass(frozen=True)
class TargetAlias:
    """One allow-listed target: requests name ``alias``; the sink calls ``url`` + the request's path."""

    alias: str
    url: str
    method: str = "POST"
    auth_header: str | None = None
    auth_secret: str | None = None  # a config-provider placeholder, never the secret itself

    def __post_init__(self) -> None:
        if self.auth_secret is not None and not self.auth_secret.startswith("${"):
            raise ConfigError(
                SOURCE, f"outbox.target.{self.alias}.auth.secret", "is a literal secret",
                fix="reference it through a config provider, e.g. ${file:/path/secrets.properties:token}",
            )  # fmt: skip
        if (self.auth_header is None) != (self.auth_secret is None):
            raise ConfigError(
                SOURCE, f"outbox.target.{self.alias}.auth.header", "set auth_header and auth_secret together"
            )


def outbox_sink_config(
    *,
    receipts_bootstrap_servers: str,
    targets: Sequence[TargetAlias],
    topic: str = REQUESTS_TOPIC,
    receipts_topic: str = RECEIPTS_TOPIC,
    dlq_topic: str = DLQ_TOPIC,
    dlq_replication_factor: int = 1,
    tasks_max: int = 1,
    retry_max_duration_ms: int = 600_000,
    backoff_initial_ms: int = 500,
    backoff_max_ms: int = 30_000,
    http_request_timeout_ms: int = 30_000,
    max_in_flight_requests: int = 8,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The connector config: read_committed, raw bytes in, DLQ with context headers, the allow-list."""
    if not targets:
        raise ConfigError(SOURCE, "outbox.targets", "no target aliases", fix="name at least one TargetAlias")
    config = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": str(tasks_max),
        "topics": topic,
        # The sink decodes the Avro single-object value itself; keys are business ids as text.
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "header.converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        # Aborted outbox writes are never delivered (docs/architecture.md, rule 3).
        "consumer.override.isolation.level": "read_committed",
        "consumer.override.auto.offset.reset": "earliest",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq_topic,
        "errors.deadletterqueue.topic.replication.factor": str(dlq_replication_factor),
        "errors.deadletterqueue.context.headers.enable": "true",
        "errors.log.enable": "true",
        "errors.log.include.messages": "false",
        "outbox.receipts.topic": receipts_topic,
        "outbox.receipts.bootstrap.servers": receipts_bootstrap_servers,
        "outbox.retry.max.duration.ms": str(retry_max_duration_ms),
        "outbox.retry.backoff.initial.ms": str(backoff_initial_ms),
        "outbox.retry.backoff.max.ms": str(backoff_max_ms),
        "outbox.http.request.timeout.ms": str(http_request_timeout_ms),
        "outbox.max.in.flight.requests": str(max_in_flight_requests),
        "outbox.targets": ",".join(t.alias for t in targets),
    }
    for t in targets:
        prefix = f"outbox.target.{t.alias}."
        config[prefix + "url"] = t.url
        config[prefix + "method"] = t.method
        if t.auth_header is not None and t.auth_secret is not None:
            config[prefix + "auth.header"] = t.auth_header
            config[prefix + "auth.secret"] = t.auth_secret
    config.update(extra or {})
    return config


def create_outbox_topics(
    bootstrap_servers: str,
    *,
    requests: str = REQUESTS_TOPIC,
    receipts: str = RECEIPTS_TOPIC,
    dlq: str = DLQ_TOPIC,
    partitions: int = 3,
) -> None:
    """Create the outbox's topics if missing (``ikkai.contract.kafka.ensure_topics``: the brokers' replication).

    Receipts are not compacted although keyed by decision_id: one decision may have a receipt per target.
    """
    kafka.ensure_topics(bootstrap_servers, (requests, receipts), partitions)
    kafka.ensure_topics(bootstrap_servers, (dlq,), 1)

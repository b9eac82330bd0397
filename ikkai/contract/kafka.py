"""How every ikkai client talks to Kafka: the producer and consumer settings of rule 3, and topic creation.

Rule 3 (docs/architecture.md): producers are idempotent (``enable.idempotence``, ``acks=all``,
at most 5 requests in flight, so retries can neither duplicate nor reorder), and consumers of
processed topics read committed. Every producer and consumer ikkai builds starts from these.
Topics are never auto-created: ``ensure_topics`` creates the missing ones with the brokers'
default replication factor (-1), so the same code makes one replica on the embedded stack and
three on a three-broker cluster.

Where the cluster is and as whom to talk to it travel together, as one ``KafkaContext``: resolved
once where a command or a service starts (a flag, ``IKKAI_BOOTSTRAP_SERVERS`` and the client-properties
file ``IKKAI_KAFKA_CONFIG`` names, a clusters-file entry, or the embedded stack's record), then passed
to every client explicitly; no client reads the environment on its own. Without security settings,
clients speak PLAINTEXT.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ikkai.contract.kafka_security import (
    NO_SECURITY,
    SecurityConfig,
    client_security,
    load_security,
)
from ikkai.errors import ConfigError, KafkaAccessError
from ikkai.settings import BOOTSTRAP_VAR, KAFKA_CONFIG_VAR, Endpoints, ikkai_home, recorded_endpoints

IDEMPOTENT_PRODUCER: Mapping[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
}
BROKERS_DEFAULT = -1  # replication factor: the brokers' default.replication.factor


READ_COMMITTED: Mapping[str, Any] = {"isolation.level": "read_committed"}
# A reader that assigns its partitions and reads to their end (markers, claims, the tests' reads): the default
# 500 ms long poll made every read cost ~1 s (the fetch that reaches the end, then the next query queued behind the
# next fetch); with sparse connections (the default) a new client connects to the partition leader only on demand,
# after its bootstrap connection is gone: 50-500 ms of timers per read.
QUICK_TO_END: Mapping[str, Any] = {"fetch.wait.max.ms": 10, "enable.sparse.connections": False}

# librdkafka's log line when the broker hangs up before answering the first request: a plaintext
# client at a TLS or SASL listener (or the other way round) sees it on every attempt.
_MISMATCH = "in state APIVERSION_QUERY"


class _Lines(logging.Handler):
    """librdkafka's log lines for one check, kept instead of printed (each refused attempt logs one)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass(frozen=True)
class KafkaContext:
    """One Kafka cluster and how to reach it: its bootstrap servers and the client security settings.

    Every producer, consumer and admin client ikkai builds takes its settings from one of these
    (quix-streams' ``ConnectionConfig``, kcctl's context: one object for "where and as whom").
    Pickled into Spark tasks, the security settings travel as the path of their file, never as
    the secrets themselves (``SecurityConfig.__reduce__``).
    """

    bootstrap_servers: str
    security: SecurityConfig = NO_SECURITY

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError("kafka", "bootstrap servers", "empty", fix="name at least one broker as host:port")

    @classmethod
    def from_environment(cls, bootstrap_servers: str, env: Mapping[str, str] = os.environ) -> KafkaContext:
        """The cluster at ``bootstrap_servers`` as the environment's client file (``IKKAI_KAFKA_CONFIG``) says, read
        now: the one door from the environment to a context, for an entry point (a command, a service's start, a
        test) to call once and pass the context down."""
        return cls(bootstrap_servers, client_security(env))

    @classmethod
    def of(cls, where: KafkaContext, source: str) -> KafkaContext:
        """``where``, checked to be a resolved cluster: for the public constructors that take one (the outbox emitter,
        the receipt reader, the outbox topics). A bare address is refused, never resolved here: the environment is
        read once, where the service starts, not by every constructor it calls."""
        if isinstance(where, KafkaContext):
            return where
        raise ConfigError(
            source, "cluster", f"is a {type(where).__name__}, not a KafkaContext",
            fix="resolve the cluster once where the service starts, KafkaContext.from_environment(address) "
            "(IKKAI_KAFKA_CONFIG's client file, read then), and pass that context",
        )  # fmt: skip

    @classmethod
    def recorded(cls, endpoints: Endpoints) -> KafkaContext:
        """The cluster a running stack's endpoints name, with the client file they record (none: PLAINTEXT)."""
        return cls.at(endpoints.bootstrap_servers, endpoints.kafka_config or None)

    @classmethod
    def at(cls, bootstrap_servers: str, security_file: str | Path | None) -> KafkaContext:
        """The cluster at ``bootstrap_servers`` with the settings of ``security_file`` (none: PLAINTEXT)."""
        return cls(bootstrap_servers, load_security(Path(security_file)) if security_file else NO_SECURITY)

    def broker(self, address: str) -> KafkaContext:
        """One broker of this cluster, asked at its own address, as the same client."""
        return KafkaContext(address, self.security)

    def describe(self) -> str:
        """``host:9092 (SASL_SSL, SCRAM-SHA-512 as 'ikkai' (from ...))`` — safe to print."""
        return f"{self.bootstrap_servers} ({self.security.describe()})"

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """Any client's settings: the cluster, how to authenticate to it, and ``extra``.

        For admin clients, and for the few readers that must see uncommitted records on purpose
        (the smoke test's and the tests' read_uncommitted checks); every other reader takes ``consumer_config``.
        """
        return {"bootstrap.servers": self.bootstrap_servers, **self.security.librdkafka, **extra}

    def consumer_config(self, group_id: str, **extra: Any) -> dict[str, Any]:
        """A read_committed consumer's settings; ``extra`` adds to them (offsets, EOF events), never weakens them."""
        return {**self.client_config(), "group.id": group_id, **extra, **READ_COMMITTED}

    def producer_config(self, **extra: Any) -> dict[str, Any]:
        """An idempotent producer's settings; ``extra`` adds to them (a transactional.id), never weakens them."""
        return {**self.client_config(), **extra, **IDEMPOTENT_PRODUCER}

    def spark_options(self) -> dict[str, str]:
        """Spark's Kafka source and sink options: ``kafka.bootstrap.servers`` and the security keys as written."""
        return {"kafka.bootstrap.servers": self.bootstrap_servers, **self.security.spark}


def resolve_cluster(given: str | None = None, env: Mapping[str, str] = os.environ) -> KafkaContext | None:
    """The Kafka cluster a command means, resolved once; None when nothing names one.

    ``given`` (a ``--bootstrap`` flag), else ``IKKAI_BOOTSTRAP_SERVERS``, each with the client file
    ``IKKAI_KAFKA_CONFIG`` names; else the embedded stack ``ikkai stack up`` recorded in ``IKKAI_HOME``,
    with the client file it recorded (a secured stack's) unless ``IKKAI_KAFKA_CONFIG`` names another.
    """
    bootstrap = (given or env.get(BOOTSTRAP_VAR, "")).strip()
    if bootstrap:
        return KafkaContext.from_environment(bootstrap, env)
    endpoints = recorded_endpoints(ikkai_home(env))
    if endpoints is None:
        return None
    return KafkaContext.at(endpoints.bootstrap_servers, env.get(KAFKA_CONFIG_VAR, "").strip() or endpoints.kafka_config)


# A cluster that has not caught up answers these for a moment: a broker re-registering after missed
# heartbeats (INVALID_REPLICATION_FACTOR: "only 2 broker(s) are registered"), a controller moving, a
# leader not elected yet. Asked again within the deadline, they give way; any other error is final.
_NOT_YET = frozenset({
    KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.NOT_CONTROLLER, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.BROKER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
})  # fmt: skip
TOPIC_DEADLINE_S = 120.0


def ensure_topics(
    kafka: KafkaContext,
    names: Iterable[str],
    partitions: int,
    *,
    config: Mapping[str, str] | None = None,
    deadline_s: float = TOPIC_DEADLINE_S,
) -> list[str]:
    """Create the missing ones with ``partitions`` partitions and ``config``; the names created.

    Returns once every broker's metadata shows each topic with a leader for each partition, so
    whichever broker a client asks next knows it. A cluster that lags (a broker re-registering, a
    broker that has not yet learned of a topic just created) is asked again until ``deadline_s``;
    a topic someone else created meanwhile is as good as ours.
    """
    wanted = list(dict.fromkeys(names))
    admin = AdminClient(kafka.client_config())
    give_up_at = time.monotonic() + deadline_s
    created: list[str] = []
    while True:
        existing = admin.list_topics(timeout=30).topics
        missing = [n for n in wanted if n not in existing or existing[n].error is not None]
        new = [NewTopic(n, partitions, BROKERS_DEFAULT, config=dict(config or {})) for n in missing]
        again = False
        for name, future in admin.create_topics(new).items() if new else []:
            try:
                future.result(timeout=30)
                created.append(name)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                if (error.retriable() or error.code() in _NOT_YET) and time.monotonic() < give_up_at:
                    again = True
                    continue
                raise ConfigError("kafka", name, f"cannot create the topic: {exc}") from exc
        if not again:
            break
        time.sleep(0.5)
    wait_until_usable(kafka, wanted, give_up_at)
    return created


def _unusable(metadata: Any, names: Iterable[str]) -> list[str]:
    """The topics ``metadata`` does not show, or shows with an error or a partition without a leader."""
    topics = metadata.topics
    return [
        n
        for n in names
        if n not in topics
        or topics[n].error is not None
        or not topics[n].partitions
        or any(p.leader < 0 for p in topics[n].partitions.values())
    ]


def wait_until_usable(kafka: KafkaContext, names: Iterable[str], give_up_at: float) -> None:
    """Wait until each broker, asked at its own address, shows every topic of ``names`` with its leaders."""
    names = list(names)
    brokers = AdminClient(kafka.client_config()).list_topics(timeout=30).brokers
    for broker in sorted(brokers.values(), key=lambda b: b.id):
        address = f"{broker.host}:{broker.port}"
        client = AdminClient(kafka.broker(address).client_config())
        while True:
            try:
                lagging = _unusable(client.list_topics(timeout=10), names)
            except KafkaException as exc:
                lagging = [f"({exc.args[0].name()})"]
            if not lagging:
                break
            if time.monotonic() > give_up_at:
                raise ConfigError(
                    "kafka", ", ".join(lagging),
                    f"broker {broker.id} ({address}) still shows no leader for it or does not know it",
                    fix="check that every broker runs and can reach the controllers; then try again",
                )  # fmt: skip
            time.sleep(0.2)


def _without_client_certificate(security: SecurityConfig) -> bool:
    keys = ("ssl.keystore.location", "ssl.keystore.certificate.chain")
    return security.protocol.endswith("SSL") and not any(k in security.properties for k in keys)


def check_access(kafka: KafkaContext, timeout: float = 10.0) -> None:
    """Ask the cluster for its metadata as every client will; one clear error when it refuses or cannot be reached.

    librdkafka retries a failed login quietly for ever; a command that is about to start a job or
    an emitter asks first, so wrong credentials or a wrong CA read as one line within seconds.
    """
    security, bootstrap = kafka.security, kafka.bootstrap_servers
    failures: list[KafkaError] = []
    lines = _Lines()
    logger = logging.Logger("ikkai.kafka.access")  # not registered: one per check, dropped with it
    logger.addHandler(lines)
    admin = AdminClient(kafka.client_config(error_cb=failures.append), logger=logger)
    codes = {KafkaError._AUTHENTICATION: "authentication", KafkaError._SSL: "tls"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb: a refused login or handshake is reported there, not by list_topics
            if not any(f.code() in codes for f in failures):
                failures.append(exc.args[0])
        if any(f.code() in codes for f in failures) or sum(_MISMATCH in line for line in lines.lines) >= 3:
            break
    fatal = [f for f in failures if f.code() in codes]
    if fatal:
        reason = codes[fatal[0].code()]
        oauth = security.properties.get("sasl.mechanism") == "OAUTHBEARER"
        fix = (
            "check clientId and clientSecret in sasl.jaas.config and sasl.oauthbearer.token.endpoint.url; the broker "
            "checks the token's signature (its JWKS), audience and issuer"
            if reason == "authentication" and oauth
            else "check the user and password in sasl.jaas.config, and sasl.mechanism"
            if reason == "authentication"
            else "check ssl.truststore.location (the CA that signed the brokers' certificates) and security.protocol"
        )
        raise KafkaAccessError(bootstrap, reason, security.describe(), fatal[0].str(), fix)
    if sum(_MISMATCH in line for line in lines.lines) >= 3:
        raise KafkaAccessError(
            bootstrap, "protocol", security.describe(), "the broker hangs up before answering any request",
            fix="security.protocol does not match the broker's listener (e.g. PLAINTEXT against SASL_SSL)"
            + (", or the listener requires a client certificate (ssl.client.auth=required): name one signed by a CA "
               "the broker trusts in ssl.keystore.location" if _without_client_certificate(security) else "")
            + ": name the right client settings in IKKAI_KAFKA_CONFIG",
        )  # fmt: skip
    detail = failures[-1].str() if failures else f"no metadata within {timeout:.0f} s"
    raise KafkaAccessError(
        bootstrap, "unreachable", security.describe(), detail,
        fix="check the bootstrap servers, that the brokers run, and that security.protocol matches their listener",
    )  # fmt: skip

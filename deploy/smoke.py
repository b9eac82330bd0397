"""A short end-to-end check of a running stack; the README's first command until `ikkai demo` exists.

It proves the two things every later component relies on, against the real services:
1. transactions: one committed and one aborted transaction; a read_committed consumer
   sees exactly the committed records, a read_uncommitted one sees both;
2. Kafka Connect: a FileStreamSource connector lands the lines of a file in a topic,
   reading the file name through the ``file`` config provider, and is deleted again.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer

from deploy.connect_rest import ConnectClient
from ikkai.contract import kafka
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints, endpoints_connect_auth
from stack.errors import StackError

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"


@dataclass
class SmokeReport:
    checks: list[dict[str, object]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check["ok"] for check in self.checks)

    def add(self, name: str, ok: bool, detail: str, seconds: float) -> None:
        self.checks.append({"check": name, "ok": ok, "detail": detail, "seconds": round(seconds, 2)})


def create_topic(cluster: KafkaContext, topic: str, partitions: int = 1) -> None:
    kafka.ensure_topics(cluster, [topic], partitions)


def consume_all(cluster: KafkaContext, topic: str, isolation: str, expected: int, timeout: float = 30.0) -> list[bytes]:
    """Values of ``topic`` from the beginning, until ``expected`` arrived or the topic stays quiet."""
    consumer = Consumer(cluster.client_config(**{
        "group.id": f"ikkai-smoke-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": isolation,  # read_uncommitted too, on purpose: the smoke test counts the aborted
    }))  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if len(values) >= expected:
                    quiet_until = quiet_until or time.monotonic() + 2
                    if time.monotonic() > quiet_until:
                        break
                continue
            if message.error():
                continue
            values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


def check_transactions(endpoints: Endpoints, report: SmokeReport) -> None:
    started = time.monotonic()
    topic = f"_ikkai.smoke.txn.{uuid.uuid4().hex[:8]}"
    cluster = KafkaContext.recorded(endpoints)
    create_topic(cluster, topic)
    producer = Producer(cluster.producer_config(**{"transactional.id": f"ikkai.smoke.{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=f"k{i}", value=f"committed-{i}")
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, key=f"k{i}", value=f"aborted-{i}")
    producer.flush(30)
    producer.abort_transaction(30)
    committed = consume_all(cluster, topic, "read_committed", 3)
    everything = consume_all(cluster, topic, "read_uncommitted", 5)
    ok = sorted(committed) == [b"committed-0", b"committed-1", b"committed-2"] and len(everything) == 5
    report.add(
        "transactions",
        ok,
        f"read_committed saw {len(committed)} of 3 committed; read_uncommitted saw {len(everything)} of 5",
        time.monotonic() - started,
    )


def check_file_source(endpoints: Endpoints, report: SmokeReport) -> None:
    started = time.monotonic()
    client = ConnectClient(endpoints.connect_url, auth=endpoints_connect_auth(endpoints))
    plugins = {p["class"] for p in client.connector_plugins()}
    if FILE_SOURCE not in plugins:
        raise StackError("connect", f"{FILE_SOURCE} is not loaded (plugins: {sorted(plugins)})")
    suffix = uuid.uuid4().hex[:8]
    topic = f"_ikkai.smoke.file.{suffix}"
    name = f"ikkai-smoke-{suffix}"
    cluster = KafkaContext.recorded(endpoints)
    create_topic(cluster, topic)
    with tempfile.TemporaryDirectory(prefix="ikkai-smoke-") as tmp:
        source = Path(tmp) / "lines.txt"
        source.write_text("".join(f'{{"payment_id": "p-{i}"}}\n' for i in range(3)))
        secrets = Path(tmp) / "source.properties"
        secrets.write_text(f"path={source}\n")
        client.put_connector_config(name, {
            "connector.class": FILE_SOURCE,
            "tasks.max": "1",
            "file": f"${{file:{secrets}:path}}",
            "topic": topic,
        })  # fmt: skip
        try:
            values = consume_all(cluster, topic, "read_committed", 3)
        finally:
            client.delete_connector(name)
    ok = values == [f'{{"payment_id": "p-{i}"}}'.encode() for i in range(3)]
    report.add("connect-file-source", ok, f"{len(values)} of 3 lines landed in {topic}", time.monotonic() - started)


def run_smoke(endpoints: Endpoints) -> SmokeReport:
    report = SmokeReport()
    check_transactions(endpoints, report)
    check_file_source(endpoints, report)
    return report

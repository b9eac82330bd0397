"""The hostile matrix's deployment: one outbox sink against the hostile server, and the check of a batch.

``Deployment`` deploys the shipped bundle's sink on the embedded stack's Connect worker with the
hostile server (and its TLS listener, and a host that does not resolve) as targets, writes each
batch in one committed transaction, and reads the receipts and the DLQ back with read_committed
consumers (``Observed``). ``check`` holds a batch to every invariant the matrix's docstring lists
(``test_hostile_matrix.py``).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from demo.receiver import ReferenceReceiver
from deploy.connect_rest import ConnectRestError
from ikkai.contract.outbox import Receipt
from ikkai.settings import Endpoints
from outbox_sink.receipts import decode_receipt
from stack.kit.topic_io import unique
from tests.outbox_sink.conftest import DeployedSink, deploy_sink
from tests.outbox_sink.hostile_behaviours import ALWAYS
from tests.outbox_sink.hostile_records import BODY_ONLY, DNS, HOSTILE, TLS, Spec, Written, materialise
from tests.outbox_sink.hostile_server import HostileServer

PARTITIONS = 3
# A short budget, so a request the server never answers properly is dead-lettered within seconds.
# The deadline per attempt leaves a loaded machine room for a normal answer (loopback: milliseconds).
SINK = {"backoff_initial_ms": 200, "backoff_max_ms": 1_000, "retry_max_duration_ms": 10_000,
        "http_request_timeout_ms": 2_000}  # fmt: skip
WAIT = 90.0  # for every outcome of one batch: the budget, a deadline per attempt, a loaded machine
CONTEXT_PARTITION, CONTEXT_OFFSET = "__connect.errors.partition", "__connect.errors.offset"


@dataclass
class Observed:
    """Everything read_committed consumers have seen on the receipts and DLQ topics so far."""

    receipts: dict[str, list[Receipt]] = field(default_factory=lambda: defaultdict(list))  # by idempotency key
    undecodable_receipts: int = 0
    dead_letters: dict[tuple[int, int], list[dict[str, str]]] = field(default_factory=lambda: defaultdict(list))


class Deployment:
    """One outbox sink against the hostile server, a producer for its requests and readers for what comes back."""

    def __init__(
        self, stack: Endpoints, receiver: ReferenceReceiver, server: HostileServer, sets: Sequence[str] = (),
        more_targets: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        """``sets``: further values of the shipped bundle (``--set``), e.g. a schema registry; ``more_targets``:
        aliases and URLs added as the bundle's template adds targets (``with_targets``: many of them)."""
        self.server = server
        self.sink: DeployedSink = deploy_sink(
            stack, receiver, partitions=PARTITIONS, **SINK, more_targets=more_targets,
            sets=[f"targets.{HOSTILE}.url={server.url}", f"targets.{TLS}.url={server.tls_url}",
                  f"targets.{DNS}.url=http://no-such-host.invalid/api", *sets],
        )  # fmt: skip
        bootstrap = stack.bootstrap_servers
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("test.hostile")})
        self.producer.init_transactions(30)
        self.observed = Observed()
        self._receipts = self._reader(bootstrap, self.sink.receipts_topic)
        self._dlq = self._reader(bootstrap, self.sink.dlq_topic)
        self.batches = 0
        self.last_batch: list[Written] = []

    @staticmethod
    def _reader(bootstrap: str, topic: str) -> Consumer:
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": unique("test.hostile.reader"), "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": False,
        })  # fmt: skip
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        return consumer

    def close(self) -> None:
        self._receipts.close()
        self._dlq.close()
        self.producer.flush(10)
        with contextlib.suppress(ConnectRestError):  # a worker a hostile record brought down: the test said so
            self.sink.client.delete_connector(self.sink.name)

    def write(self, specs: Sequence[Spec]) -> list[Written]:
        """The batch in one committed transaction; each record with its offset."""
        self.batches += 1
        run = uuid.uuid4().hex[:8]
        batch: list[Written] = []
        for i, spec in enumerate(specs):
            batch.append(materialise(spec, f"{run}{self.batches}x{i}", batch[-1] if batch else None))
        return self.produce(batch)

    def produce(self, batch: list[Written]) -> list[Written]:
        """Records already made into bytes, in one committed transaction; each with its offset."""
        self.producer.begin_transaction()
        for written in batch:
            spec, fields = written.spec, written.fields
            key = fields["key"].encode() if fields is not None else spec.raw[:16] if spec.raw else None
            if spec.kind == "corrupt":
                key = f"corrupt-{written.nonce}".encode()
            headers = [("traceparent", v) for n, v in spec.hostile if n == "traceparent"]

            def landed(error: Any, message: Any, written: Written = written) -> None:
                assert error is None, f"producing {written.spec.describe()} failed: {error}"
                written.offset = message.offset()

            self.producer.produce(
                self.sink.requests_topic, value=written.value, key=key, partition=spec.partition,
                headers=headers or None, on_delivery=landed,
            )  # fmt: skip
        self.producer.commit_transaction(60)
        assert all(w.offset >= 0 for w in batch)
        return batch

    def read(self, timeout: float) -> None:
        for message in self._receipts.consume(500, timeout):
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error.str()
                continue
            try:
                receipt = decode_receipt(message.value() or b"")
            except Exception:  # noqa: BLE001 - counted and reported: a receipt nobody can read is no receipt
                self.observed.undecodable_receipts += 1
                continue
            self.observed.receipts[receipt.idempotency_key or ""].append(receipt)
        for message in self._dlq.consume(500, 0.1):
            if message.error() is not None:
                continue
            headers = {k: bytes(v or b"").decode(errors="replace") for k, v in message.headers() or []}
            source = (int(headers.get(CONTEXT_PARTITION, "-1")), int(headers.get(CONTEXT_OFFSET, "-1")))
            self.observed.dead_letters[source].append(headers)

    def settled(self, written: Written) -> bool:
        """Whether the record's final outcome (receipt, and DLQ entry where one is due) is in."""
        dlq = self.observed.dead_letters.get((written.spec.partition, written.offset))
        if not written.decodable:
            return bool(dlq)
        receipts = self.observed.receipts.get(written.idempotency_key or "")
        return bool(receipts) and (receipts[0].outcome == "DELIVERED" or bool(dlq))

    def wait(self, batch: Sequence[Written], seconds: float = WAIT) -> None:
        deadline = time.monotonic() + seconds
        while not all(self.settled(w) for w in batch) and time.monotonic() < deadline:
            if self.task_failure() is not None:
                break
            self.read(0.5)
        self.read(1.0)  # a moment more, for a second receipt or DLQ entry that should not be there

    def task_failure(self) -> str | None:
        """None while every task is RUNNING; else the states and the first trace."""
        try:
            tasks = self.sink.client.connector_status(self.sink.name)["tasks"]
        except ConnectRestError as exc:  # an OutOfMemoryError ends the worker (-XX:+ExitOnOutOfMemoryError)
            return f"the Connect worker is gone: {exc}"
        if tasks and all(t["state"] == "RUNNING" for t in tasks):
            return None
        traces = [
            [line for i, line in enumerate(t.get("trace", "").splitlines()) if i < 2 or line.startswith("Caused by")]
            for t in tasks
            if t["state"] != "RUNNING"
        ]
        return f"tasks {[t['state'] for t in tasks]}: {traces}"

    def run(self, specs: Sequence[Spec]) -> list[Written]:
        """Write the batch, wait for every outcome, check every invariant."""
        failure = self.task_failure()
        assert failure is None, (
            f"the sink was not running before the batch: {failure}; the batch before was:\n  "
            + "\n  ".join(w.spec.describe() for w in self.last_batch)
        )
        batch = self.last_batch = self.write(specs)
        self.wait(batch)
        check(self, batch)
        return batch


def check(deployment: Deployment, batch: Sequence[Written]) -> None:
    """Every invariant of the matrix's docstring over one batch; one message naming every record that broke one."""
    observed, server = deployment.observed, deployment.server
    problems: list[str] = []
    failure = deployment.task_failure()
    if failure is not None:
        problems.append(f"the task is not RUNNING: {failure}")
    applied = Counter(a.nonce for a in server.applications())
    keys_applied = defaultdict(set)
    for a in server.applications():
        keys_applied[a.nonce].add(a.idempotency_key)
    for w in batch:
        what = f"{w.spec.describe()} [nonce {w.nonce}, offset {w.offset}]"
        dlq = observed.dead_letters.get((w.spec.partition, w.offset), [])
        if applied[w.nonce] > 1:
            problems.append(f"{what}: applied {applied[w.nonce]} times, keys {keys_applied[w.nonce]}")
        if not w.decodable:
            if len(dlq) != 1:
                problems.append(f"{what}: undecodable, {len(dlq)} DLQ entries (want exactly 1)")
            continue
        receipts = observed.receipts.get(w.idempotency_key or "", [])
        if len(receipts) != 1:
            outcomes = [r.outcome for r in receipts]
            problems.append(f"{what}: {len(receipts)} receipts {outcomes} (want exactly 1); DLQ entries {len(dlq)}")
            continue
        receipt = receipts[0]
        classes = [d.get("ikkai.dlq.error_class") for d in dlq]
        if receipt.outcome == "DEAD_LETTERED" and len(dlq) != 1:
            problems.append(f"{what}: DEAD_LETTERED ({receipt.reason!s:.120}) with {len(dlq)} DLQ entries (want 1)")
        if receipt.outcome == "DELIVERED":
            if dlq:
                problems.append(f"{what}: DELIVERED and on the DLQ too ({classes})")
            if applied[w.nonce] != 1 or keys_applied[w.nonce] != {w.idempotency_key}:
                problems.append(
                    f"{what}: DELIVERED, but the server applied it {applied[w.nonce]} times with keys "
                    f"{keys_applied[w.nonce]} (want once with {w.idempotency_key})"
                )
        spec = w.spec
        if spec.expect_class is not None and (receipt.outcome != "DEAD_LETTERED" or classes != [spec.expect_class]):
            problems.append(f"{what}: {receipt.outcome} {classes} ({receipt.reason!s:.160}), want {spec.expect_class}")
        if spec.expect_reason is not None and spec.expect_reason not in (receipt.reason or ""):
            problems.append(f"{what}: the reason {receipt.reason!s:.160} does not say {spec.expect_reason!r}")
        reason_bytes = len((receipt.reason or "").encode())
        if reason_bytes > 1024 or any(
            len(v.encode()) > 1024 for d in dlq for k, v in d.items() if k.startswith("ikkai")
        ):
            problems.append(f"{what}: a reason or dead-letter header over 1 KiB ({reason_bytes} bytes)")
        if (
            spec.well_formed
            and spec.behaviour in BODY_ONLY
            and receipt.outcome == "DELIVERED"
            and (spec.times == ALWAYS and (receipt.status_code is None or "body" not in (receipt.reason or "")))
        ):
            problems.append(f"{what}: DELIVERED without its status or without saying what the body did: "
                            f"{receipt.status_code} {receipt.reason!s:.120}")  # fmt: skip
        expected = w.expected_outcome()
        if expected is not None and receipt.outcome != expected:
            problems.append(
                f"{what}: {receipt.outcome} (status {receipt.status_code}, {receipt.reason!s:.160}), want {expected}"
            )
    if observed.undecodable_receipts:
        problems.append(f"{observed.undecodable_receipts} receipts on the topic cannot be decoded")
    escapes = [e for e in server.escapes() if any(f"/{w.nonce}/" in e for w in batch)]
    if escapes:
        problems.append(f"requests left the target's base URL: {[e[:120] for e in escapes]}")
    assert not problems, "the hostile matrix broke an invariant:\n  " + "\n  ".join(problems)

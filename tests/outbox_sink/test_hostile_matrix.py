"""No record and no server can stop the outbox sink: a hostile matrix on the real Connect worker.

Batches of outbox records — well-formed ones with hostile field values (control characters,
CR LF, non-Latin-1 such as ``notify-客户``, 8 KB and 64 KB values, very long paths, ``..;``
segments, arbitrary traceparent bytes), values under the request schema's fingerprint with a
corrupt body (a length claiming 2 GB, a bad union index, a cut), arbitrary bytes — are written
in one transaction each with a plain transactional producer (the sink reads read_committed) to
the REAL outbox sink connector in the embedded stack's REAL Connect worker, which sends them to
a scripted server (``hostile_server.py``) that answers each path as the test asks: normally
(200, 201, 409 then 201, 303), or with headers and a stalled body, a dripping body, a huge body,
a 1xx and nothing, a reset after the headers, a garbage status line; and a TLS target whose
handshake never completes.

After each batch, read back with read_committed consumers and Connect's REST status:

* the connector's task is RUNNING;
* every decodable record has exactly one receipt (DELIVERED or DEAD_LETTERED), found by its
  Idempotency-Key; every DEAD_LETTERED one, and every undecodable record, exactly one entry on
  ``dlq.outbox`` (found by its source partition and offset); a DELIVERED one none;
* the server applied each effect at most once, and exactly once, with the record's key, for
  each DELIVERED; no request reached the server outside the target's base URL;
* where a record is well-formed and only the server misbehaves, the outcome the rules give:
  applied answers (2xx, 303) are DELIVERED, a misbehaviour on the first attempt only is retried
  and DELIVERED, one on every attempt is DEAD_LETTERED when the retry budget is spent.

The named cases (``test_every_server_behaviour``, ``test_named_hostile_records``) run every
behaviour and every sharp value once; ``test_generated_batches`` draws batches with hypothesis.
The connector is deployed once per test function, never per example. The default run is
bounded (a few batches, derandomized). A soak run draws more, from a seed, with a 300 MB body:

    IKKAI_HOSTILE_EXAMPLES=200 IKKAI_HOSTILE_SEED=12345 IKKAI_HOSTILE_HUGE_MB=300 \\
        .venv/bin/python -m pytest tests/outbox_sink/test_hostile_matrix.py -x -q
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from demo.receiver import ReferenceReceiver
from deploy.connect_rest import ConnectRestError
from ikkai.contract.codec import default_codec
from ikkai.contract.outbox import REQUEST_SCHEMA, Receipt
from ikkai.settings import Endpoints
from outbox_sink.receipts import decode_receipt
from stack.kit.topic_io import unique
from tests.outbox_sink.conftest import DeployedSink, deploy_sink
from tests.outbox_sink.hostile_server import ALWAYS, MAX_TARGET, Behaviour, HostileServer, script_path

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("IKKAI_HOSTILE_EXAMPLES", "4"))
SEED = os.environ.get("IKKAI_HOSTILE_SEED")
HUGE_BYTES = int(os.environ.get("IKKAI_HOSTILE_HUGE_MB", "64")) * 1024 * 1024
HOSTILE, TLS, DNS = "hostile-api", "tls-api", "dns-api"
PARTITIONS = 3
# A short budget, so a request the server never answers properly is dead-lettered within seconds.
# The deadline per attempt leaves a loaded machine room for a normal answer (loopback: milliseconds).
SINK = {"backoff_initial_ms": 200, "backoff_max_ms": 1_000, "retry_max_duration_ms": 10_000,
        "http_request_timeout_ms": 2_000}  # fmt: skip
WAIT = 90.0  # for every outcome of one batch: the budget, a deadline per attempt, a loaded machine
CONTEXT_PARTITION, CONTEXT_OFFSET = "__connect.errors.partition", "__connect.errors.offset"


# -- what a batch holds ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One record to write, before it has its nonce: the test makes each effect unique at write time.

    ``kind`` "request" is an outbox request whose fields are the defaults below unless a hostile
    value replaces them; "corrupt" is the request's encoding under its real fingerprint, broken by
    ``corruption``; "raw" is ``raw`` as it is (None: a tombstone).
    """

    kind: str = "request"
    partition: int = 0
    behaviour: Behaviour = Behaviour.OK
    times: int = 1
    target: str = HOSTILE
    hostile: tuple[tuple[str, Any], ...] = ()  # (field, value) pairs replacing the well-formed ones
    path_tail: str = ""  # appended to the scripted path
    path: str | None = None  # replaces the scripted path altogether
    corruption: tuple[str, str, int] | None = None  # (how, field, claim)
    raw: bytes | None = None
    body: bytes = b'{"amount": 1}'
    path_bytes: int = 0  # pads the scripted path with 'x' to this many bytes (0: no padding)
    effect_of_previous: bool = False  # same decision as the record before it, explicit effect = its target + path
    expect_class: str | None = None  # the record must be DEAD_LETTERED with this ikkai.dlq.error_class
    expect_reason: str | None = None  # ... and a reason that says this

    @property
    def well_formed(self) -> bool:
        """Only the server may misbehave: every field is one the sink can carry."""
        return (
            self.kind == "request"
            and not self.hostile
            and not self.path_tail
            and self.path is None
            and not self.path_bytes
        )

    def describe(self) -> str:
        def short(v: Any) -> str:
            text = repr(v)
            return text if len(text) <= 60 else f"{text[:40]}…({len(text)} chars)"

        if self.kind == "raw":
            return f"raw {short(self.raw)} on p{self.partition}"
        if self.kind == "corrupt":
            return f"corrupt body {self.corruption} on p{self.partition}"
        fields = ", ".join(f"{k}={short(v)}" for k, v in self.hostile)
        where = self.target if self.target != HOSTILE else f"{self.behaviour.value}×{self.times or 'always'}"
        tail = f" path{'=' + short(self.path) if self.path is not None else ' +' + short(self.path_tail)}" if (
            self.path is not None or self.path_tail) else ""  # fmt: skip
        return f"request to {where} on p{self.partition}{tail}{' with ' + fields if fields else ''}"


@dataclass
class Written:
    """A spec made into bytes, with where it landed."""

    spec: Spec
    nonce: str
    value: bytes | None
    fields: dict[str, Any] | None  # the request's fields, when it is one
    idempotency_key: str | None
    offset: int = -1

    @property
    def decodable(self) -> bool:
        return self.fields is not None

    def expected_outcome(self) -> str | None:
        """The outcome the rules give a well-formed request, or None where the matrix predicts none."""
        spec = self.spec
        if not spec.well_formed:
            return None
        if spec.target in (TLS, DNS) or spec.behaviour is Behaviour.NOT_FOUND:
            return "DEAD_LETTERED"
        if spec.behaviour in BODY_ONLY:
            return "DELIVERED"  # the status came: applied, whatever the body did next (issue 44, case 5)
        if spec.behaviour is Behaviour.RESET:
            return None  # the reset may overtake the headers: then no status came, and it is a connection error
        if not spec.behaviour.misbehaves or spec.times != ALWAYS:
            return "DELIVERED"
        return "DEAD_LETTERED"


def idempotency_key(decision_id: str, effect: str | None, target: str, path: str) -> str:
    """The key the shipped bundle's sink must send: v2, as tests/outbox_sink/idempotency_key_vectors.json derives it."""

    def part(text: str) -> bytes:
        data = text.encode()
        return f"{len(data)}:".encode() + data

    tagged = ["e", effect] if effect else ["d", target, path]
    return hashlib.sha256(b"".join(part(p) for p in ["v2", decision_id, *tagged])).hexdigest()


def materialise(spec: Spec, nonce: str, previous: Written | None = None) -> Written:
    if spec.kind == "raw":
        return Written(spec, nonce, spec.raw, None, None)
    path = script_path(spec.behaviour, nonce, times=spec.times) + spec.path_tail
    path += "x" * max(0, spec.path_bytes - len(path))
    fields: dict[str, Any] = {
        "decision_id": f"d-{nonce}", "key": f"k-{nonce}", "target": spec.target,
        "path": spec.path if spec.path is not None else path,
        "method": None, "content_type": "application/json", "body": spec.body, "headers": {},
        "created_at": 1_700_000_000_000, "model_version": "fraud@hostile", "effect": None,
    }  # fmt: skip
    for name, value in spec.hostile:
        if name in ("decision_id", "key"):
            fields[name] = f"{value}-{nonce}"  # still one effect per record
        elif name == "header_value":
            fields["headers"] = {"X-Note": value}
        elif name == "header_name":
            fields["headers"] = {value: "v"}
        elif name != "traceparent":
            fields[name] = value
    if spec.effect_of_previous:
        assert previous is not None and previous.fields is not None
        fields["decision_id"] = previous.fields["decision_id"]
        fields["effect"] = previous.fields["target"] + previous.fields["path"]  # v1 gave both one key
    if spec.kind == "corrupt":
        assert spec.corruption is not None
        return Written(spec, nonce, corrupt_encoding(fields, spec.corruption), None, None)
    value = default_codec().encode(REQUEST_SCHEMA, fields)
    key = idempotency_key(fields["decision_id"], fields["effect"], fields["target"], fields["path"])
    return Written(spec, nonce, value, fields, key)


# -- values under the request's fingerprint with a corrupt body ------------------------------------


def _long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    z &= (1 << 64) - 1
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def corrupt_encoding(fields: dict[str, Any], corruption: tuple[str, str, int]) -> bytes:
    """The request's single-object encoding (schema v2, field by field) with one part broken, as no decoder can read.

    ``("length", field, claim)``: the string or bytes ``field`` claims ``claim`` bytes, more than there are
    (or a negative count); ``("union", field, index)``: the union ``field`` names a branch it has not;
    ``("map", "headers", count)``: the headers map claims ``count`` entries; ``("cut", "", n)``: the
    encoding loses its last ``n`` bytes.
    """
    how, broken, claim = corruption
    out = bytearray(default_codec().encode(REQUEST_SCHEMA, fields)[:10])  # marker and the real fingerprint

    def text(name: str, data: bytes) -> None:
        out.extend(_long(claim if (how, broken) == ("length", name) else len(data)))
        out.extend(data)

    def union(name: str, value: str | None) -> None:
        index = claim if (how, broken) == ("union", name) else 0 if value is None else 1
        out.extend(_long(index))
        if value is not None:
            text(name, value.encode())

    for name in ("decision_id", "key", "target", "path"):
        text(name, fields[name].encode())
    union("method", fields["method"])
    text("content_type", fields["content_type"].encode())
    text("body", fields["body"])
    headers = fields["headers"]
    if headers:
        out.extend(_long(claim if how == "map" else len(headers)))
        for k, v in headers.items():
            text("header_name", k.encode())
            text("header_value", v.encode())
    out.extend(_long(0))
    out.extend(_long(fields["created_at"]))
    union("model_version", fields["model_version"])
    union("effect", fields["effect"])
    return bytes(out[:-claim]) if how == "cut" else bytes(out)


# -- the deployment and what it observes ------------------------------------------------------------


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
    """Every invariant of the module docstring over one batch; one message naming every record that broke one."""
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


@dataclass
class Matrix:
    stack: Endpoints
    receiver: ReferenceReceiver
    server: HostileServer
    deployments: dict[str, Deployment] = field(default_factory=dict)

    def __repr__(self) -> str:  # hypothesis prints it with a failing example
        return f"Matrix({self.stack.connect_url}, server {self.server.url})"

    def deployment(self, name: str) -> Deployment:
        """The test's own sink, deployed on first use: a failure in one test leaves the others theirs."""
        if name not in self.deployments:
            self.deployments[name] = Deployment(self.stack, self.receiver, self.server)
        return self.deployments[name]


@pytest.fixture(scope="module")
def matrix(stack: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    home: Path = tmp_path_factory.mktemp("hostile")
    with ReferenceReceiver(home / "receiver.sqlite") as receiver, HostileServer(huge_bytes=HUGE_BYTES) as server:
        m = Matrix(stack, receiver, server)
        try:
            yield m
        finally:
            for deployment in m.deployments.values():
                deployment.close()
            m.deployments.clear()  # the producers go with them, before the stack stops


# -- the named cases ------------------------------------------------------------------------------

EVERY_BEHAVIOUR = [
    Spec(behaviour=b, times=times, partition=i % PARTITIONS)
    for i, (b, times) in enumerate((b, t) for b in Behaviour for t in (1, ALWAYS))
] + [Spec(target=TLS, partition=0)]

# Issue 44, each case on the shipped bundle's sink: (1) a ~400 KB alias, and a 300 KB request answered with a 390 KB
# status line, each dead-lettered with bounded reasons (the DLQ entry must be there); (2) a valid 2,048-byte path whose
# quoting overflowed the stack, answered 404; (5) is EVERY_BEHAVIOUR's stall-body, drip and huge; (6) an explicit
# effect equal to the default effect of the record before it, same decision: two keys, both applied; (8) encoded dot
# segments, and a target whose host does not resolve.
ISSUE_44 = [
    Spec(hostile=(("target", "t" * 400_000),), partition=0, expect_class="unknown-target"),
    Spec(behaviour=Behaviour.HUGE_GARBAGE, times=ALWAYS, body=b"x" * 300_000, partition=1,
         expect_class="retries-exhausted"),
    Spec(behaviour=Behaviour.NOT_FOUND, times=ALWAYS, path_tail="?next=https://", path_bytes=2048, partition=2,
         expect_class="rejected-by-target", expect_reason="returned 404"),
    Spec(behaviour=Behaviour.OK, partition=0),
    Spec(behaviour=Behaviour.OK, partition=0, effect_of_previous=True),
    Spec(path_tail="/.%252e/.%252e/.%252e/.%252e/.%252e/internal", partition=1, expect_class="bad-path"),
    Spec(path_tail="/..%3b/..%3b/..%3b/..%3b/..%3b/internal", partition=2, expect_class="bad-path"),
    Spec(path_tail="/..%00/..%00/..%00/..%00/..%00/internal", partition=0, expect_class="bad-path"),
    Spec(target=DNS, partition=1, expect_class="retries-exhausted", expect_reason="cannot resolve host"),
]  # fmt: skip

# Only the body misbehaves, after a 2xx status line and headers: the effect was applied.
BODY_ONLY = frozenset({Behaviour.STALL_BODY, Behaviour.DRIP, Behaviour.HUGE})
V2_HEADER_LEN = 10
SHARP_VALUES: list[tuple[str, Any]] = [
    ("effect", "notify-客户"),
    ("effect", "hold\r\nX-Injected: yes"),
    ("decision_id", "d\x00"),
    ("key", "客户"),
    ("model_version", "fraud@\x7f1"),
    ("model_version", "模型"),
    ("content_type", "application/json; charset=\x01"),
    ("content_type", "text/plain; x=ü"),  # Latin-1: the HTTP layer carries it
    ("header_value", "v" * 8 * 1024),
    ("header_value", "ok\r\nX-Injected: yes"),
    ("header_value", "客户"),
    ("header_name", "X Bad"),
    ("header_name", "X-Ikkai-Effect"),
    ("method", "TRACE"),
    ("method", "pöst"),
    ("target", "attacker-api"),
    ("target", "客户"),
    ("traceparent", b"\xff\xfe not utf-8"),
    ("traceparent", "00-客户-01".encode()),
    ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX-Injected: yes"),
]
SHARP_PATHS: list[tuple[str | None, str]] = [
    (None, "/" + "a" * (MAX_TARGET + 10)),  # the server answers 414
    (None, "/" + "a" * 600_000),  # reason and default effect embed it: past 1 MB if nothing cuts them
    (None, "/..;/..;/..;/..;/..;/internal"),  # Tomcat resolves ..; as ..
    (None, "/%2e%2e;x/%2e%2e;x/%2e%2e;x/%2e%2e;x/%2e%2e;x/internal"),
    (None, "/a b"),
    (None, "/客户"),
    (None, "/x\r\nHost: evil"),
    ("ok/1/relative", ""),
    ("//evil.example/x", ""),
]
CORRUPTIONS = [
    ("length", "decision_id", 2**31 - 9),  # a 2 GB string
    ("length", "decision_id", 2**31 - 1),
    ("length", "body", 2**30),
    ("length", "path", 10**12),
    ("length", "key", -1),
    ("length", "header_value", 2**31 - 9),
    ("union", "method", 2),
    ("union", "effect", -1),
    ("union", "model_version", 2**31 - 1),
    ("map", "headers", 2**30),
    ("cut", "", 1),
    ("cut", "", 20),
]
RAW = [
    None,
    b"",
    b"\x00",
    b"\xc3\x01",
    b"\xc3\x01" + bytes(8) + b"body",
    b"\x00\x00\x00\x00\x07avro-ish",
    b'{"json": 1}',
]


def named_records() -> dict[str, list[Spec]]:
    """The sharp records by group; each group runs on its own sink, so one that kills a task hides no other."""
    with_header = (("header_value", "v"),)
    return {
        "field-values": [Spec(hostile=(v,), partition=i % PARTITIONS) for i, v in enumerate(SHARP_VALUES)],
        "paths": [Spec(path=p, path_tail=t, partition=i % PARTITIONS) for i, (p, t) in enumerate(SHARP_PATHS)],
        "raw-bytes": [Spec(kind="raw", raw=r, partition=i % PARTITIONS) for i, r in enumerate(RAW)],
        "corrupt-bodies": [
            Spec(
                kind="corrupt",
                corruption=c,
                partition=i % PARTITIONS,
                hostile=with_header if c[1].startswith("header") or c[0] == "map" else (),
            )
            for i, c in enumerate(CORRUPTIONS)
        ],
    }


def test_every_server_behaviour(matrix: Matrix) -> None:
    matrix.deployment("behaviours").run(EVERY_BEHAVIOUR)


def test_issue_44_cases(matrix: Matrix) -> None:
    matrix.deployment("issue-44").run([*ISSUE_44, Spec(behaviour=Behaviour.OK, partition=2)])


@pytest.mark.parametrize("group", list(named_records()))
def test_named_hostile_records(matrix: Matrix, group: str) -> None:
    # A well-formed request after the group: the partition goes on behind the hostile ones.
    matrix.deployment(f"records-{group}").run([*named_records()[group], Spec(behaviour=Behaviour.OK)])


# -- generated batches ------------------------------------------------------------------------------

CONTROL = st.sampled_from(["\x00", "\x01", "\t", "\n", "\r", "\r\n", "\x1b", "\x1f", "\x7f", "\x85"])
NON_LATIN1 = st.text(
    alphabet=st.characters(min_codepoint=0x100, max_codepoint=0x2FFFF, exclude_categories=["Cs"]),
    min_size=1,
    max_size=6,
)
TEXT = st.one_of(
    st.builds(lambda a, c, b: f"{a}{c}{b}", st.text("abc", max_size=3), CONTROL, st.text("xyz", max_size=3)),
    NON_LATIN1,
    st.just("notify-客户"),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0xFF), min_size=1, max_size=4),
    st.sampled_from([8 * 1024, 8 * 1024 + 1, 64 * 1024]).map(lambda n: "v" * n),
    st.just(""),
    st.text(max_size=12),
)
FIELDS = ["decision_id", "key", "effect", "model_version", "content_type", "header_value", "header_name", "method",
          "target"]  # fmt: skip
HOSTILE_FIELD = st.one_of(
    st.tuples(st.sampled_from(FIELDS), TEXT),
    st.tuples(st.just("traceparent"), st.one_of(st.binary(max_size=40), TEXT.map(lambda t: t.encode()))),
)
PATH_TAIL = st.one_of(
    st.sampled_from(
        ["/..;", "/..;/..;/..;/..;/..;/x", "/a b", "/#f", "/\\", "/%2e%2e;/%2e%2e;/%2e%2e;/%2e%2e;/%2e%2e;"]
    ),
    st.sampled_from([MAX_TARGET + 1, 200_000, 600_000]).map(lambda n: "/" + "p" * n),
    TEXT.map(lambda t: "/" + t),
)
REQUEST = st.builds(
    Spec,
    partition=st.integers(0, PARTITIONS - 1),
    behaviour=st.sampled_from(list(Behaviour)),
    times=st.sampled_from([1, ALWAYS]),
    target=st.sampled_from([HOSTILE, HOSTILE, HOSTILE, TLS]),
    hostile=st.lists(HOSTILE_FIELD, max_size=2, unique_by=lambda f: f[0]).map(tuple),
    path_tail=st.one_of(st.just(""), st.just(""), PATH_TAIL),
    body=st.one_of(st.just(b"{}"), st.binary(max_size=64)),
)
CORRUPT = st.builds(
    lambda c, p: Spec(kind="corrupt", corruption=c, partition=p, hostile=(("header_value", "v"),)),
    st.one_of(
        st.tuples(st.sampled_from(["length"]), st.sampled_from(["decision_id", "key", "path", "body", "header_value"]),
                  st.one_of(st.integers(2**20, 2**62), st.integers(-(2**62), -1))),
        st.tuples(st.just("union"), st.sampled_from(["method", "model_version", "effect"]),
                  st.one_of(st.integers(2, 2**31), st.integers(-(2**31), -1))),
        st.tuples(st.just("map"), st.just("headers"), st.integers(2, 2**31)),
        st.tuples(st.just("cut"), st.just(""), st.integers(1, 40)),
    ),
    st.integers(0, PARTITIONS - 1),
)  # fmt: skip
RAW_BYTES = st.builds(
    lambda raw, p: Spec(kind="raw", raw=raw, partition=p),
    st.one_of(st.none(), st.binary(max_size=300), st.binary(max_size=40).map(lambda b: b"\xc3\x01" + b)),
    st.integers(0, PARTITIONS - 1),
)
BATCH = st.lists(st.one_of(REQUEST, REQUEST, REQUEST, CORRUPT, RAW_BYTES), min_size=3, max_size=10)


def _settings() -> Any:
    configured = settings(
        max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: one example costs seconds of a real worker
        suppress_health_check=list(HealthCheck), print_blob=True,
    )  # fmt: skip
    return (lambda f: seed(int(SEED))(configured(f))) if SEED is not None else configured


@_settings()
@given(batch=BATCH)
def test_generated_batches(matrix: Matrix, batch: list[Spec]) -> None:
    matrix.deployment("generated").run(batch)

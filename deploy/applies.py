"""The record of applies: who applied which bundle to which environment, when, with what result.

After each apply, CLI and ``ikkai serve`` alike (``deploy.bundle_ops.apply_data``), one record goes to the
compacted topic ``_ikkai.applies`` (``ikkai.contract.topics.APPLIES``), keyed ``<env>/<bundle>``, so the
topic keeps the last apply of each bundle in each environment. Its value is JSON of at most ``RECORD_MAX``
bytes::

    {"bundle": "payments-ingest", "env": "dev", "who": "ana@build-7", "when": "2026-11-26T19:40:02Z",
     "digest": "<sha-256 hex>", "result": "applied", "written": ["payments-ingest.payments"]}

``who`` is the OS user and host for the CLI (and the demo), ``ikkai serve`` for the service's API (its tokens
carry no names), the name given at the page's login for the page (``deploy.serve.page.login_fields``), ``ikkai
serve reconcile loop`` for its loop, which records only the passes that wrote, deleted or failed.
``digest`` is the sha-256 of the rendered configs and target states as ``ikkai bundle render`` shows them:
secret values and URL credentials redacted first, so the record holds no secret, not even its hash (rule 11),
and a changed secret alone does not change it. ``result`` is ``applied`` or ``failed``; ``written`` the
connectors whose config or state was written (for a failed apply: those written and then rolled back).

Recording is best-effort: the apply's own result is what matters, so a record that cannot be written
(Kafka unreachable, no Kafka named for the environment) is a warning, never a failed apply. The operator
page reads the last record per key with one bounded read_committed read (``deploy.kafka_windows``) and
compares its digest with the current render's: "as rendered now" or "changed since".
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, OffsetSpec

from connectors.render import RenderedBundle
from connectors.secrets import redact
from deploy.kafka_windows import Deadline, last_records, offsets
from ikkai.contract.kafka import KafkaContext, ensure_topics
from ikkai.contract.topics import APPLIES
from ikkai.errors import IkkaiError

APPLIED, FAILED = "applied", "failed"
RECORD_MAX = 16 * 1024  # bytes of one record's value; a bundle's connector names beyond it are left out
RECORD_SECONDS = 10.0  # the whole write of one record, topic creation included
READ_RECORDS = 10_000  # per partition, before its end: compaction keeps about one record per bundle and env
_COMPACTED = {"cleanup.policy": "compact"}
log = logging.getLogger("ikkai.applies")  # librdkafka's own complaints (a broker down) go here, not to stderr
_ready: set[str] = set()  # bootstrap servers whose applies topic exists: asked once per process
_ready_lock = threading.Lock()


class RecordFailed(IkkaiError):
    """The record of an apply could not be written; the apply itself is not affected."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"apply of {key} not recorded in {APPLIES}: {reason}",
                         fix="the apply itself is done; check that the environment's Kafka is reachable")  # fmt: skip
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class LastApply:
    """One record of ``_ikkai.applies``, as read back."""

    who: str
    when: str
    digest: str
    result: str
    written: tuple[str, ...]


def key_of(env: str, bundle: str) -> str:
    return f"{env}/{bundle}"


def config_digest(rendered: RenderedBundle) -> str:
    """sha-256 of each connector's name, target state and config, redacted as ``bundle render`` prints it."""
    connectors = sorted(rendered.connectors, key=lambda c: c.name)
    shown = [[c.name, c.state, sorted(redact(c.config).items())] for c in connectors]
    return hashlib.sha256(json.dumps(shown, separators=(",", ":")).encode()).hexdigest()


def cli_user() -> str:
    """``user@host`` of this process: who ran ``ikkai bundle apply``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's arbitrary user)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def record_value(rendered: RenderedBundle, *, who: str, when: datetime, result: str, written: Sequence[str]) -> bytes:
    """The record's JSON, at most ``RECORD_MAX`` bytes: connector names that do not fit are left out (counted)."""
    data: dict[str, Any] = {
        "bundle": rendered.name, "env": rendered.env, "who": who[:200],
        "when": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "digest": config_digest(rendered),
        "result": result,
    }  # fmt: skip
    names = list(written)
    while True:
        left_out = len(written) - len(names)
        value = json.dumps({**data, "written": names, **({"left_out": left_out} if left_out else {})}).encode()
        if len(value) <= RECORD_MAX or not names:
            return value
        names = names[: len(names) // 2]


def parse_value(value: bytes | None) -> LastApply | None:
    """A record's value as read back; None for a tombstone, an oversized or a foreign value."""
    if value is None or len(value) > RECORD_MAX:
        return None
    try:
        data = json.loads(value)
        return LastApply(
            who=str(data["who"]), when=str(data["when"]), digest=str(data["digest"]), result=str(data["result"]),
            written=tuple(str(n) for n in data.get("written", [])),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None


def record_apply(kafka: KafkaContext, key: str, value: bytes, seconds: float = RECORD_SECONDS) -> None:
    """Write one record with an idempotent producer, the compacted topic created first if missing; within
    ``seconds``, else ``RecordFailed``."""
    deadline = Deadline(seconds)
    try:
        _ensure_topic(kafka, deadline)
        failures: list[KafkaError] = []
        producer = Producer(kafka.producer_config(**{"message.timeout.ms": int(seconds * 1000), "logger": log}))
        producer.produce(APPLIES, key=key.encode(), value=value,
                         on_delivery=lambda error, _: failures.append(error) if error else None)  # fmt: skip
        left = producer.flush(deadline.left())
    except KafkaException as exc:
        raise RecordFailed(key, str(exc.args[0])) from exc
    if failures or left:
        raise RecordFailed(key, failures[0].str() if failures else f"not delivered within {seconds:.0f} s")


def _ensure_topic(kafka: KafkaContext, deadline: Deadline) -> None:
    with _ready_lock:
        if kafka.bootstrap_servers in _ready:
            return
    topic = AdminClient(kafka.client_config(logger=log)).list_topics(APPLIES, timeout=deadline.left()).topics[APPLIES]
    if topic.error is not None:
        ensure_topics(kafka, [APPLIES], 1, config=_COMPACTED, deadline_s=deadline.left())
    with _ready_lock:
        _ready.add(kafka.bootstrap_servers)


def last_applies(kafka: KafkaContext, env: str, seconds: float) -> tuple[dict[str, LastApply], bool]:
    """Bundle (its manifest's name) → its last apply in ``env``, read within ``seconds`` (read_committed, at most
    ``READ_RECORDS`` records per partition), and whether the read got to the end (else an older apply may show);
    ({}, True) when the topic does not exist yet. Raises ``KafkaException`` when Kafka does not answer."""
    deadline = Deadline(seconds)
    admin = AdminClient(kafka.client_config(logger=log))
    topic = admin.list_topics(APPLIES, timeout=deadline.left()).topics[APPLIES]
    if topic.error is not None:
        return {}, True
    partitions = [(APPLIES, p) for p in sorted(topic.partitions)]
    ends = offsets(admin, partitions, OffsetSpec.latest(), deadline)  # type: ignore[no-untyped-call]
    starts = offsets(admin, partitions, OffsetSpec.earliest(), deadline)  # type: ignore[no-untyped-call]
    windows = {w: (max(starts[w], ends[w] - READ_RECORDS), ends[w]) for w in partitions}
    records, unread = last_records(kafka, windows, deadline)
    found: dict[str, LastApply] = {}
    prefix = f"{env}/"
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        key = (record.key or b"").decode("utf-8", "replace")
        if not key.startswith(prefix):
            continue
        parsed = parse_value(record.value)
        if parsed is None:
            found.pop(key[len(prefix) :], None)
        else:
            found[key[len(prefix) :]] = parsed
    return found, not unread

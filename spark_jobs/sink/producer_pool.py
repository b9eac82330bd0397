"""The sink's transactional producers, kept between batches: one initialised producer per ``transactional.id``.

A write that finds its (query, partition)'s producer in the pool (``get``) costs one transaction; one
that does not takes a ``fresh`` producer, whose ``init_transactions`` fences every older instance of
the id. Who keeps a pool: each Python worker keeps one for the process (``process_pool``, bounded:
the oldest is closed beyond ``WORKER_MAX_PRODUCERS``), and the executor writer keeps its own, which
never closes a producer by itself (``max_producers=None``): the writer ``evict``s, and only producers
no request holds. ``evict`` purges and closes (what is open aborts); ``close_all`` at the end.

A kept producer is reused only while it would still commit: the same settings, and still the last
of this host to initialise its id (``OwnerFiles``, a hint that saves producing a whole batch into a
producer another worker fenced since). Correctness never depends on the pool: a producer fenced
anyway fails its transaction, which writes nothing, and the write starts anew with a fresh one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from ikkai.contract import kafka
from ikkai.private_folders import private_temp_folder
from spark_jobs.sink.commit_markers import Lineage
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.kafka_errors import call_with_retries
from spark_jobs.sink.record import Headers
from spark_jobs.sink.size_bounds import producer_batch_bytes

Key = tuple[str, str]  # a kept producer's: (bootstrap servers, transactional.id)
Refused = list[tuple[str, bytes | None, int]]  # records the broker refused as too large: topic, key, value size
WORKER_MAX_PRODUCERS = 16  # a Python worker's pool: the oldest producer is closed beyond this


@dataclass
class KeptProducer:
    """A producer whose transactions are initialised, kept between batches.

    ``committed`` is what this producer knows for sure: its (query, partition)'s committed source
    offsets on each commits topic, read after ``init_transactions`` or committed by itself. It
    stays true while the producer is not fenced, and a fenced producer cannot commit anything, so
    a stale belief can only make a write fail (then a fresh producer re-reads the marker), never
    skip records that were not committed.
    """

    producer: Producer
    settings: tuple[Any, ...]
    token: str  # written to its owner file after init_transactions (OwnerFiles)
    committed: dict[str, dict[int, int]] = field(default_factory=dict)
    lineage: dict[str, Lineage] = field(default_factory=dict)  # per commits topic, as ``committed``
    refused: Refused = field(default_factory=list)  # this transaction's, noted by its delivery reports


class OwnerFiles:
    """Which process of this host initialised a ``transactional.id`` last: a hint, not a lock.

    Spark hands partition p's task to whichever idle Python worker comes first, so p's producer in
    one worker is fenced whenever another worker of the same host initialises p. Reading the file
    before reuse notices that without first producing a whole batch into a fenced producer. The
    files live in ``<temp>/ikkai-transactional-ids-<uid>``, refused unless only this user can write
    it (``ikkai.private_folders``): a folder made by another user stops the write with a
    ``ConfigError`` that says how to fix it. A file that cannot be written (a full disk) is said once
    on stderr, and from then on the hint is off (every kept producer is reused; one fenced since
    fails its transaction and the write starts anew): reuse is never lost without a word.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder  # None: the per-user temporary folder, made and checked by the first ``check``
        self.unwritable = ""  # why an owner file could not be written: the hint is off, said once

    def check(self) -> None:
        """Make and check the folder, once: a ``ConfigError`` if another user can write it (before any producer
        exists), said once on stderr if it cannot be made."""
        if self.folder is not None or self.unwritable:
            return
        try:
            self.folder = private_temp_folder(
                "ikkai-transactional-ids", "producer owner files",
                "whoever can write there decides which of the job's producers are reused",
            )  # fmt: skip
        except OSError as exc:
            self._say_unwritable(Path(exc.filename or "ikkai-transactional-ids"), exc)

    def claim(self, key: Key) -> str:
        """Record this process as the last to initialise ``key``'s id; the token that says so."""
        token = f"{os.getpid()}.{uuid.uuid4().hex}"
        self.check()
        if self.unwritable or self.folder is None:
            return token
        path = self.folder / _digest(key)
        staged = path.with_name(f"{path.name}.{token}")
        try:
            staged.write_text(token)
            os.replace(staged, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                staged.unlink()
            self._say_unwritable(path, exc)
        return token

    def still_owner(self, key: Key, token: str) -> bool:
        """No other process of this host initialised ``key``'s id since ``token`` was claimed (as far as known)."""
        if self.unwritable or self.folder is None:
            return True
        try:
            return (self.folder / _digest(key)).read_text() == token
        except OSError:
            return False

    def _say_unwritable(self, path: Path, exc: OSError) -> None:
        self.unwritable = f"{path}: {exc.strerror or exc}"
        sys.stderr.write(
            f"ikkai sink: the producer owner file {self.unwritable}; producers are reused without checking it from "
            "now on (a producer another worker fenced fails its transaction, which is written again): free "
            f"{path.parent} for the hint to come back at the next start\n"
        )
        sys.stderr.flush()


def _digest(key: Key) -> str:
    return hashlib.sha256("\0".join(key).encode()).hexdigest()[:32]


class ProducerPool:
    """Initialised transactional producers by (bootstrap servers, ``transactional.id``), oldest first.

    ``max_producers``: how many it keeps; beyond that, ``fresh`` closes the oldest. None: it never
    closes one by itself, its owner ``evict``s (the executor writer, which knows which ones a
    request holds). Thread-safe: the executor writer writes different partitions in parallel.
    """

    def __init__(self, max_producers: int | None = WORKER_MAX_PRODUCERS, owners: OwnerFiles | None = None) -> None:
        self.max_producers = max_producers
        self.owners = owners or OwnerFiles()
        self._kept: OrderedDict[Key, KeptProducer] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, config: SinkConfig, transactional_id: str) -> KeptProducer | None:
        """The kept producer of ``transactional_id`` if it may still commit; else None (and it is evicted)."""
        key = (config.cluster.bootstrap_servers, transactional_id)
        with self._guard:
            kept = self._kept.get(key)
        if kept is None:
            return None
        if kept.settings != producer_settings(config) or not self.owners.still_owner(key, kept.token):
            self.evict(key)
            return None
        with self._guard:
            if key in self._kept:
                self._kept.move_to_end(key)
        return kept

    def fresh(self, config: SinkConfig, transactional_id: str) -> KeptProducer:
        """A new producer of ``transactional_id``, its transactions initialised: every older instance is fenced.

        It knows nothing committed yet: the caller reads the marker into ``committed``.
        """
        key = (config.cluster.bootstrap_servers, transactional_id)
        self.evict(key)
        self.owners.check()  # a squatted folder is refused before a producer exists
        deadline = config.retry_deadline_s
        refused: Refused = []
        make = transactional_producer if config.transactions else producer_without_transactions
        producer = make(config, transactional_id, refused)
        call_with_retries(
            transactional_id, "init_transactions", lambda: producer.init_transactions(deadline), deadline_s=deadline
        )
        kept = KeptProducer(producer, producer_settings(config), self.owners.claim(key), refused=refused)
        with self._guard:
            self._kept[key] = kept
            over = len(self._kept) - self.max_producers if self.max_producers is not None else 0
            oldest = list(self._kept)[: max(over, 0)]
        for old in oldest:
            self.evict(old)
        return kept

    def evict(self, key: Key) -> None:
        """Close ``key``'s producer, if kept: nothing of an unfinished transaction goes out, what is open aborts."""
        kept = self.release(key)
        if kept is not None:
            kept.producer.purge()
            with contextlib.suppress(KafkaException):  # a fenced producer cannot abort; its successor did
                kept.producer.close()

    def release(self, key: Key) -> KeptProducer | None:
        """Take ``key``'s producer out of the pool as it is, open: whoever takes it ends it."""
        with self._guard:
            return self._kept.pop(key, None)

    def kept(self, key: Key) -> KeptProducer | None:
        """``key``'s producer as kept, unchecked (``get`` checks before a write)."""
        with self._guard:
            return self._kept.get(key)

    def oldest_first(self) -> list[Key]:
        """The kept producers' keys, oldest (least recently used) first."""
        with self._guard:
            return list(self._kept)

    def close_all(self) -> None:
        for key in self.oldest_first():
            self.evict(key)


_process_pool = ProducerPool()


def process_pool() -> ProducerPool:
    """This process's pool: what a Python worker's writes (``--transactional-writer worker``) keep."""
    return _process_pool


def producer_settings(config: SinkConfig) -> tuple[Any, ...]:
    """What a kept producer must have been made with to be reused for ``config``."""
    return (config.transaction_timeout_ms, tuple(sorted(config.producer_config.items())), producer_batch_bytes(config),
            config.transactions)  # fmt: skip


def transactional_producer(config: SinkConfig, transactional_id: str, refused: Refused | None = None) -> Producer:
    """The sink's producer; with ``refused``, every record the broker refuses as too large is noted there."""
    return Producer(sink_producer_settings(config, transactional_id, refused))


def sink_producer_settings(config: SinkConfig, transactional_id: str, refused: Refused | None) -> dict[str, Any]:
    """The sink's producer's librdkafka settings (``transactional_producer``)."""
    batch = producer_batch_bytes(config)  # a batch of several records within every written topic's max.message.bytes
    extra: dict[str, Any] = {} if batch is None else {"batch.size": batch}
    if refused is not None:
        extra |= {"delivery.report.only.error": True, "on_delivery": functools.partial(_note_too_large, refused)}
    return {
        **config.cluster.client_config(),
        **config.producer_config,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": config.transaction_timeout_ms,
        **kafka.IDEMPOTENT_PRODUCER,
        "linger.ms": 5,
        # Connect to the brokers at once. With sparse connections (the default) init_transactions
        # found no broker up half of the time and waited for librdkafka's 500 ms coordinator timer:
        # 57 or 508 ms per new producer, now 5-15 ms (measured in BENCHMARKS.md).
        "enable.sparse.connections": False,
        **extra,
    }  # fmt: skip


class ProducerWithoutTransactions(Producer):
    """Benchmarks only (``SinkConfig.transactions`` False): the sink's producer with Kafka transactions off.

    The writer calls it as it calls a transactional one; ``init_transactions`` and ``begin_transaction`` do
    nothing, ``commit_transaction`` waits for every record's delivery and fails on any delivery error,
    ``abort_transaction`` drops what is not sent yet. What a reader sees is NOT exactly-once: nothing is
    fenced, a batch is visible before its marker, and a re-run batch is written again.
    """

    def __init__(self, settings: dict[str, Any], failed: list[KafkaError]) -> None:
        super().__init__(settings)
        self.failed = failed  # delivery errors since the last commit (the delivery reports note them)

    def init_transactions(self, *_: Any) -> None:
        return None

    def begin_transaction(self) -> None:
        self.failed.clear()

    def commit_transaction(self, timeout: float = -1) -> None:
        left = self.flush(timeout)
        if self.failed:
            raise KafkaException(self.failed[0])
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{left} records not delivered", retriable=True))

    def abort_transaction(self, timeout: float = -1) -> None:
        self.purge()
        self.flush(timeout)
        self.failed.clear()


def producer_without_transactions(
    config: SinkConfig, transactional_id: str, refused: Refused | None = None
) -> ProducerWithoutTransactions:
    """``transactional_producer``'s settings less its transactions: what the transactions cost, like for like."""
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failed.append(error)
            if refused is not None:
                _note_too_large(refused, error, message)

    settings = sink_producer_settings(config, transactional_id, refused)
    del settings["transactional.id"], settings["transaction.timeout.ms"]
    settings |= {"delivery.report.only.error": True, "on_delivery": delivered}
    return ProducerWithoutTransactions(settings, failed)


def _note_too_large(refused: Refused, error: KafkaError | None, message: Message) -> None:
    """Delivery report (errors only): a record the broker refused as too large, by topic, key and value size."""
    if error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        refused.append((str(message.topic()), message.key(), len(message.value() or b"")))


def produce(
    producer: Producer,
    topic: str,
    key: bytes,
    value: bytes | None,
    partition: int,
    ts: int | None,
    headers: Headers | None = None,
) -> None:
    """One record into the open transaction; a full local queue is drained first, never an error.

    One ``produce`` call per record, not ``Producer.produce_batch`` per topic (confluent-kafka 2.16,
    read in its source and tried): the batch call drops a message's ``headers`` without a word,
    refuses a ``timestamp`` (``NotImplementedError``), ignores a message's own ``partition`` (only
    the call's applies: librdkafka is not given ``RD_KAFKA_MSG_F_PARTITION``), and reports a full
    queue or a fenced or failed transaction per message (``_error`` in its dict, a count of queued
    messages) instead of raising, every message after a full queue failing too. Its dict per message
    costs about what the call saves: 0.61-1.47 of ``produce``'s time per round, median 0.87, within
    the noise of a loaded machine (``benchmarks.sink_handover``); not worth a second error path.
    """
    extra: dict[str, Any] = {} if ts is None else {"timestamp": ts}
    if headers:  # pairs from Arrow's map, or a dict; in the order given, so a replay writes the same bytes
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        extra["headers"] = [(name, text.encode()) for name, text in pairs]
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition, **extra)
            return
        except BufferError:  # local queue full: let deliveries drain, then try again
            producer.poll(0.1)

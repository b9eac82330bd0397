"""One Kafka transaction per (query, micro-batch N, partition p), by a producer each Python worker keeps.

``write_partition`` is what a Spark task of the transactional sink calls once it holds every
record of Kafka partition p for batch N, in their final order:

- Partition p of batch N is one transaction of a producer with the stable ``transactional.id``
  ``<app>.<query>.<p>``. A fresh producer's ``init_transactions()`` fences any older instance and
  aborts its open transaction; then the last committed batch of (query, p) is read from
  ``_ikkai.commits`` (read_committed). If it is >= N the partition is skipped. Otherwise the
  records and the new marker ``(query, p) -> N`` are written and committed together.
- The Python worker keeps that producer for the next batches (Spark reuses workers) and knows
  the last committed batch from its own commits, so a steady batch costs one transaction. A kept
  producer that another worker or instance fenced in between fails its transaction, which
  writes nothing; the write then starts anew with a fresh producer, which re-reads the marker.
- Every marker must have been written with the job's partition count; anything else stops the
  job, because a different layout would re-write committed records under new marker keys.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import sys
import tempfile
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer

from ikkai.errors import ConfigError
from spark_jobs.commit_markers import (
    COMMITS_PARTITION,
    COMMITS_TOPIC,
    CommitMarker,
    CommitMarkerError,
    marker_key,
    read_markers,
)
from spark_jobs.kafka_errors import ErrorKind, TransactionError, call_with_retries, classify
from spark_jobs.serialization import default_codec

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class SinkConfig:
    app: str
    query: str
    bootstrap_servers: str
    output_topics: tuple[str, ...]
    partitions: int
    order_by: tuple[str, ...]
    commits_topic: str = COMMITS_TOPIC
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    retry_deadline_s: float = 30.0
    producer_config: Mapping[str, str] = field(default_factory=dict)
    # Set when every Spark partition of a batch holds rows of one Kafka partition, named in this
    # column (a job reading one topic, no shuffle before the sink): written in place, no shuffle.
    partition_column: str | None = None

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ConfigError("sink", "partitions", f"must be >= 1, got {self.partitions}")
        if self.retry_deadline_s * 1000 >= self.transaction_timeout_ms:
            raise ConfigError(
                "sink", "transaction.timeout.ms", "must exceed the retry deadline", fix="raise it or retry for less"
            )
        if not self.order_by:
            raise ConfigError("sink", "order_by", "is empty", fix="name the columns that order a batch's rows totally")

    def transactional_id(self, partition: int) -> str:
        return marker_key(self.app, self.query, partition).decode()


@dataclass(frozen=True)
class PartitionResult:
    partition: int
    batch_id: int
    records: int
    skipped: bool  # the marker said this batch was already committed
    outside_key_partition: int = 0  # written in place to their input's partition, not their key's default one
    new_producer: bool = False  # this worker had no usable producer: init_transactions and a marker read first
    seconds: float = 0.0  # in the task, from asking for the producer to the commit


def check_markers(config: SinkConfig, markers: Mapping[int, CommitMarker]) -> None:
    """Fail unless every marker of the query was written with ``partitions`` partitions.

    Checked before the query starts and by every writer that reads the markers (a new producer),
    so a concurrent instance with another layout is caught where the markers are read anyway.
    """
    for marker in markers.values():
        if marker.partitions != config.partitions:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query} committed batch {marker.batch_id} with {marker.partitions} partitions, "
                f"now {config.partitions}",
                fix="keep the partition count, or start a new query name with a fresh checkpoint",
            )


def _last_committed(config: SinkConfig, partition: int) -> int:
    """The newest batch committed for (query, partition), waiting for open transactions; -1 for none."""
    markers = read_markers(config.bootstrap_servers, config.app, config.query, topic=config.commits_topic)
    check_markers(config, markers)
    return markers[partition].batch_id if partition in markers else -1


def _producer(config: SinkConfig, transactional_id: str) -> Producer:
    return Producer({
        **config.producer_config,
        "bootstrap.servers": config.bootstrap_servers,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": config.transaction_timeout_ms,
        "enable.idempotence": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 5,
        # Connect to the brokers at once. With sparse connections (the default) init_transactions
        # found no broker up half of the time and waited for librdkafka's 500 ms coordinator timer:
        # 57 or 508 ms per new producer, now 5-15 ms (measured in BENCHMARKS.md).
        "enable.sparse.connections": False,
    })  # fmt: skip


@dataclass
class _Writer:
    """A producer whose transactions are initialised, kept by a Python worker between batches.

    ``committed`` is what this producer knows for sure: the newest batch of its (query, partition)
    committed on each commits topic, read after ``init_transactions`` or committed by itself. It
    stays true while the producer is not fenced, and a fenced producer cannot commit anything, so
    a stale belief can only make a write fail (then a fresh producer re-reads the marker), never
    skip a batch that was not committed.
    """

    producer: Producer
    settings: tuple[Any, ...]
    token: str  # written to the owner file after init_transactions: see _owner_file
    committed: dict[str, int] = field(default_factory=dict)


# Per Python worker process (Spark reuses workers across tasks and batches): one initialised
# producer per transactional.id, so a batch costs one transaction, not a producer, an
# init_transactions and a marker read. Bounded; the oldest is closed when a new one would exceed it.
_writers: OrderedDict[tuple[str, str], _Writer] = OrderedDict()
MAX_CACHED_PRODUCERS = 16


def _settings(config: SinkConfig) -> tuple[Any, ...]:
    return (config.transaction_timeout_ms, tuple(sorted(config.producer_config.items())))


def _owner_file(bootstrap: str, transactional_id: str) -> Path:
    """Which process of this host initialised ``transactional_id`` last: a hint, not a lock.

    Spark hands partition p's task to whichever idle Python worker comes first, so p's producer
    in one worker is fenced whenever another worker of the same host initialises p. Reading this
    file before reuse notices that without first producing a whole batch into a fenced producer.
    Correctness never depends on it: a producer fenced from another host fails its transaction
    and the write starts anew.
    """
    digest = hashlib.sha256(f"{bootstrap}\0{transactional_id}".encode()).hexdigest()[:32]
    return Path(tempfile.gettempdir()) / "ikkai-transactional-ids" / digest


def _claim(bootstrap: str, transactional_id: str) -> str:
    token = f"{os.getpid()}.{uuid.uuid4().hex}"
    path = _owner_file(bootstrap, transactional_id)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f"{path.name}.{token}")
        staged.write_text(token)
        os.replace(staged, path)
    return token


def _still_owner(bootstrap: str, transactional_id: str, token: str) -> bool:
    try:
        return _owner_file(bootstrap, transactional_id).read_text() == token
    except OSError:
        return False


def _cached_writer(config: SinkConfig, transactional_id: str) -> _Writer | None:
    writer = _writers.get((config.bootstrap_servers, transactional_id))
    if writer is None:
        return None
    if writer.settings != _settings(config) or not _still_owner(
        config.bootstrap_servers, transactional_id, writer.token
    ):
        _discard(config, transactional_id)
        return None
    _writers.move_to_end((config.bootstrap_servers, transactional_id))
    return writer


def _fresh_writer(config: SinkConfig, transactional_id: str, partition: int) -> _Writer:
    """A new producer: ``init_transactions`` fences every older one, then the marker says where we are."""
    _discard(config, transactional_id)
    deadline = config.retry_deadline_s
    producer = _producer(config, transactional_id)
    call_with_retries(
        transactional_id, "init_transactions", lambda: producer.init_transactions(deadline), deadline_s=deadline
    )
    writer = _Writer(producer, _settings(config), _claim(config.bootstrap_servers, transactional_id))
    _writers[(config.bootstrap_servers, transactional_id)] = writer
    while len(_writers) > MAX_CACHED_PRODUCERS:
        bootstrap, oldest = next(iter(_writers))
        _discard(dataclasses.replace(config, bootstrap_servers=bootstrap), oldest)
    writer.committed[config.commits_topic] = _last_committed(config, partition)
    return writer


def _discard(config: SinkConfig, transactional_id: str) -> None:
    writer = _writers.pop((config.bootstrap_servers, transactional_id), None)
    if writer is not None:
        writer.producer.purge()  # nothing of an unfinished transaction goes out
        with contextlib.suppress(KafkaException):  # a fenced producer cannot abort; its successor did
            writer.producer.close()  # aborts what is left open


def _produce(
    producer: Producer,
    topic: str,
    key: bytes,
    value: bytes | None,
    partition: int,
    ts: int | None,
    headers: Headers | None = None,
) -> None:
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


Headers = Mapping[str, str] | Sequence[tuple[str, str]]
# topic, key, value, timestamp[, headers]
Record = (
    tuple[str, bytes, "bytes | None", "int | None"] | tuple[str, bytes, "bytes | None", "int | None", "Headers | None"]
)


def write_partition(config: SinkConfig, batch_id: int, partition: int, records: Sequence[Record]) -> PartitionResult:
    """One transaction for (query, batch_id, partition), ``records`` in their final order; runs on an executor.

    The worker's producer for this transactional.id is reused when it has one. If that one
    turns out fenced (another worker or instance initialised the same id since its last commit),
    the write is done again from the start with a fresh producer, which re-reads the marker.
    """
    started = time.monotonic()
    txn_id = config.transactional_id(partition)
    writer = _cached_writer(config, txn_id)
    if writer is not None:
        try:
            result = _write(config, writer, batch_id, partition, records)
            return dataclasses.replace(result, seconds=time.monotonic() - started)
        except TransactionError as exc:
            _discard(config, txn_id)
            if exc.kind is not ErrorKind.FATAL:
                raise
            sys.stderr.write(f"transactional.id {txn_id}: producer was fenced since its last commit, starting anew\n")
        except BaseException:
            _discard(config, txn_id)
            raise
    try:
        result = _write(config, _fresh_writer(config, txn_id, partition), batch_id, partition, records)
        return dataclasses.replace(result, new_producer=True, seconds=time.monotonic() - started)
    except BaseException:
        _discard(config, txn_id)  # FATAL: the producer is dropped, never reused
        raise


def _write(
    config: SinkConfig, writer: _Writer, batch_id: int, partition: int, records: Sequence[Record]
) -> PartitionResult:
    last = writer.committed.get(config.commits_topic)
    if last is None:  # this producer has not read this commits topic yet (another query's writer)
        last = writer.committed[config.commits_topic] = _last_committed(config, partition)
    if last >= batch_id:
        return PartitionResult(partition, batch_id, 0, skipped=True)
    producer, txn_id, deadline = writer.producer, config.transactional_id(partition), config.retry_deadline_s
    call_with_retries(txn_id, "begin_transaction", producer.begin_transaction, deadline_s=deadline)
    try:
        try:
            for topic, key, value, timestamp, *headers in records:
                _produce(producer, topic, key, value, partition, timestamp, headers[0] if headers else None)
            marker = CommitMarker(config.app, config.query, partition, batch_id, config.partitions, len(records))
            _produce(
                producer, config.commits_topic, marker.key, marker.encode(default_codec()), COMMITS_PARTITION, None
            )
        except KafkaException as exc:  # produce() itself refused: fatal (fenced) or the transaction must abort
            error = exc.args[0]
            kind = classify(error)
            fix = "the transaction was not committed; Spark retries the attempt, a fenced producer is discarded"
            raise TransactionError(txn_id, "produce", error, kind, fix=fix) from exc
        call_with_retries(
            txn_id, "commit_transaction", lambda: producer.commit_transaction(deadline), deadline_s=deadline
        )
    except TransactionError as exc:
        if exc.kind is ErrorKind.ABORT:
            call_with_retries(
                txn_id, "abort_transaction", lambda: producer.abort_transaction(deadline), deadline_s=deadline
            )
        raise
    writer.committed[config.commits_topic] = batch_id
    return PartitionResult(partition, batch_id, len(records), skipped=False)

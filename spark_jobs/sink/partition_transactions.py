"""One Kafka transaction per (query, micro-batch N, partition p), by a producer each Python worker keeps.

``write_partition`` is what a Spark task of the transactional sink calls once it holds every
record of Kafka partition p for batch N, in their final order:

- Partition p of batch N is one transaction of a producer with the stable ``transactional.id``
  ``<app>.<query>.<p>``. A fresh producer's ``init_transactions()`` fences any older instance and
  ends its open transaction; then (query, p)'s marker is read from partition p of the query's
  commits topic (``commit_markers``: nobody else writes there, so nothing can hide it).
- The marker records *source offsets*: per input partition, the next input offset whose output
  for p is not committed yet. Every record names the input record it came from; records below
  the marker's offsets are already committed and are left out, the rest and the new marker (the
  offsets merged with this transaction's) are written and committed together. A partition with
  nothing left is skipped. Batch numbers decide nothing, so a lost, reset or restored Spark
  checkpoint, or other batch boundaries (``maxOffsetsPerTrigger`` changed), can neither
  duplicate nor drop output: a re-run writes exactly what is missing.
- The Python worker keeps that producer for the next batches (Spark reuses workers) and knows
  the marker from its own commits, so a steady batch costs one transaction. A kept producer that
  another worker or instance fenced in between fails its transaction, which writes nothing; the
  write then starts anew with a fresh producer, which re-reads the marker.
- Every marker must have been written with the job's partition count and input topic; anything
  else stops the job, because a different layout would re-write committed records.

Fault injection, for the cluster tests only (``pause_before_commit``): with
``IKKAI_FAULT_PAUSE_BEFORE_COMMIT`` naming a folder, the first write to reach its commit holds its
transaction open there until released, so a test can build a zombie on purpose. Unset, it does nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from ikkai.contract import kafka
from ikkai.contract.codec import RecordCodec, default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError, IkkaiError
from spark_jobs.sink.commit_markers import (
    CommitMarker,
    CommitMarkerError,
    VersionCut,
    check_names,
    commits_topic_for,
    handed_over,
    marker_key,
    read_marker,
)
from spark_jobs.sink.grown_layout import OriginLayout, not_held
from spark_jobs.sink.kafka_errors import ErrorKind, TransactionError, call_with_retries, classify
from spark_jobs.sink.size_bounds import Headers as Headers
from spark_jobs.sink.size_bounds import (
    Origin,
    producer_batch_bytes,
    read_topic_limits,
    set_aside_too_large,
    transaction_chunks,
)
from spark_jobs.sink.size_bounds import Record as Record

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
# Bound of one transaction in bytes, for the default timeout (options.default_max_transaction_bytes).
DEFAULT_MAX_TRANSACTION_BYTES = 60 * 1024 * 1024


TRANSACTIONAL_WRITERS = ("worker", "executor")
DEFAULT_TRANSACTIONAL_WRITER = "executor"  # SinkConfig, the jobs' options and --transactional-writer


@dataclass(frozen=True)
class SinkConfig:
    app: str
    query: str
    cluster: KafkaContext  # where and as whom: pickled into the tasks with the config
    output_topics: tuple[str, ...]
    partitions: int
    order_by: tuple[str, ...]
    source_topic: str  # the input topic: every record names its input record by partition and offset
    source_columns: tuple[str, str] = ("input_partition", "input_offset")
    commits_topic: str = ""  # default: the query's own, _ikkai.commits.<app>.<query>
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    retry_deadline_s: float = 30.0
    producer_config: Mapping[str, str] = field(default_factory=dict)
    # Set when every Spark partition of a batch holds rows of one Kafka partition, named in this
    # column (a job reading one topic, no shuffle before the sink): written in place, no shuffle.
    partition_column: str | None = None
    # What decides the output besides the input (infer: the model version; enrich: its settings). A
    # change is recorded in the marker as a cut: where, per input partition, the new version took over.
    writer_version: str = ""
    # Where a query with no marker of its own starts: the committed offsets of the query it takes over
    # from (a handover, --after-query: query_handover), or explicit input offsets (--start-offsets).
    # Given at a start, recorded by the claim that made the query owner (claim_log); later starts get them from there.
    after_query: str = ""
    start_offsets: Mapping[int, int] = field(default_factory=dict)
    # A handover across a grown layout: what the origin, of another partition count, committed, read at every
    # start (query_handover.with_origin_layout). Every write leaves out the records it holds (grown_layout).
    origin_layout: OriginLayout | None = None
    # Every output record's key maps to its input record's partition (enrich: events keyed like the input,
    # dead letters keyed to their partition): a routed write puts it where an in-place write would.
    outputs_follow_input: bool = False
    # Kafka's topic id of source_topic (KIP-516), looked up at start: every marker records it, and a
    # marker of another id (the topic was deleted and recreated) is refused. "": not known, not checked.
    source_topic_id: str = ""
    # --input-recreated: the recreated input's topic id the operator accepted; markers of another id are
    # rebased to offset 0 of this one before the query starts (rebase_on_recreated_input).
    input_recreated: str = ""
    shadow: bool = False  # --shadow: a candidate that may claim only *.shadow topics (ikkai.contract.owner_claims)
    # Where a record too large to produce is set aside, as a dead letter of stage dlq_stage ("": not set
    # aside, the batch fails), and how large a record the producer takes (its message.max.bytes).
    dlq_topic: str = ""
    dlq_stage: str = ""
    dead_letter_codec: RecordCodec | None = None  # the job's wire format; None: the default codec
    # Bytes of output one transaction holds at most (besides the records bound of the Spark source):
    # a batch over it is written as several transactions, split only between input records.
    max_transaction_bytes: int = DEFAULT_MAX_TRANSACTION_BYTES
    # Each written topic's max.message.bytes, read at start (size_bounds.read_topic_limits): a record over its
    # topic's is set aside as a dead letter, the producer's batches stay under the smallest. Empty: not read.
    topic_max_message_bytes: Mapping[str, int] = field(default_factory=dict)
    # Who keeps the producers: each Python worker ("worker"), or one writer process per executor
    # ("executor": executor_writer, reached through executor_writer_client) that keeps p's producer for good.
    transactional_writer: str = DEFAULT_TRANSACTIONAL_WRITER

    def __post_init__(self) -> None:
        check_names(self.app, self.query)
        if self.after_query:
            check_names(self.app, self.after_query)
            if self.after_query == self.query:
                raise ConfigError(
                    "sink",
                    "after_query",
                    f"{self.after_query!r} is the query itself",
                    fix="hand over from another query",
                )
        if not self.commits_topic:
            object.__setattr__(self, "commits_topic", commits_topic_for(self.app, self.query))
        if self.partitions < 1:
            raise ConfigError("sink", "partitions", f"must be >= 1, got {self.partitions}")
        if self.retry_deadline_s * 1000 >= self.transaction_timeout_ms:
            raise ConfigError(
                "sink", "transaction.timeout.ms", "must exceed the retry deadline", fix="raise it or retry for less"
            )
        if not self.order_by:
            raise ConfigError("sink", "order_by", "is empty", fix="name the columns that order a batch's rows totally")
        if self.transactional_writer not in TRANSACTIONAL_WRITERS:
            raise ConfigError(
                "sink", "transactional_writer", repr(self.transactional_writer), fix=f"one of {TRANSACTIONAL_WRITERS}"
            )

    def transactional_id(self, partition: int) -> str:
        return marker_key(self.app, self.query, partition).decode()


OPERATOR_GUIDE = "docs/exactly-once.md, 'What an operator may change, and how'"


@dataclass(frozen=True)
class PartitionResult:
    partition: int
    batch_id: int
    records: int
    skipped: bool  # the marker said every record of this partition was already committed
    outside_key_partition: int = 0  # written in place to their input's partition, not their key's default one
    already_committed: int = 0  # records left out: the marker's source offsets say they are committed
    new_producer: bool = False  # this worker had no usable producer: init_transactions and a marker read first
    seconds: float = 0.0  # in the task, from asking for the producer to the commit


def check_markers(config: SinkConfig, markers: Mapping[int, CommitMarker]) -> None:
    """Fail unless every marker of the query was written with this layout and this input topic.

    Checked before the query starts and by every writer that reads its marker (a new producer),
    so a concurrent instance with another layout is caught where the markers are read anyway.
    """
    for marker in markers.values():
        if marker.source_topic_id and config.source_topic_id and marker.source_topic_id != config.source_topic_id:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query}, partition {marker.partition}: input topic {config.source_topic!r} was "
                f"deleted and recreated (the marker's topic id {marker.source_topic_id}, now {config.source_topic_id}):"
                " offsets committed on the old topic mean nothing on the new one",
                fix=f"to decide every record of the new topic once, start with --input-recreated "
                f"{config.source_topic_id} and a fresh --checkpoint ({OPERATOR_GUIDE}: topic recreation)",
            )
        if marker.partitions != config.partitions:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query} committed batch {marker.batch_id} with {marker.partitions} partitions, "
                f"now {config.partitions}",
                fix="keep the partition count its markers were written with (to add partitions, follow "
                "docs/exactly-once.md, 'What an operator may change, and how')",
            )
        if marker.source_topic != config.source_topic:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query} committed the output of input topic {marker.source_topic!r}, "
                f"now it reads {config.source_topic!r}: its offsets mean nothing there",
                fix=f"run it on {marker.source_topic!r} again; another input is another query with a checkpoint "
                "of its own (--query, --checkpoint), beside this one",
            )


@dataclass(frozen=True)
class Lineage:
    """What a committed marker says besides its offsets: the version that wrote it, every cut, the handover."""

    version: str = ""
    cuts: tuple[VersionCut, ...] = ()
    started_after: str = ""

    def written_by(self, version: str, batch_id: int, committed: Mapping[int, int]) -> Lineage:
        """The lineage once ``version`` has written: a new version is a cut at the offsets committed so far."""
        if version == self.version:
            return self
        cut = (VersionCut(version, batch_id, dict(committed)),) if version else ()
        return dataclasses.replace(self, version=version, cuts=(*self.cuts, *cut))


def _committed_offsets(config: SinkConfig, partition: int) -> tuple[dict[int, int], Lineage]:
    """(query, partition)'s committed source offsets and lineage; call it after ``init_transactions``.

    A query without a marker starts where it was told: at ``start_offsets``, else after a handover
    (``after_query``) at the offsets the query it took over from committed (final: the handover fenced
    that query's writers and recorded itself there first): across a grown layout, where every old output
    partition committed (``OriginLayout.start``; ``uncommitted`` leaves out the rest the origin holds);
    otherwise from the beginning.
    """
    marker = read_marker(config.cluster, config.app, config.query, partition, topic=config.commits_topic)
    if marker is not None:
        check_markers(config, {partition: marker})
        if marker.handed_over_to:
            raise CommitMarkerError(*handed_over(config.commits_topic, config.query, marker.handed_over_to))
        return dict(marker.source_offsets), Lineage(marker.writer_version, marker.cuts, marker.started_after)
    if config.origin_layout is not None and not config.start_offsets:
        return config.origin_layout.start(), Lineage(started_after=config.after_query)
    if config.after_query and not config.start_offsets:
        origin_topic = commits_topic_for(config.app, config.after_query)
        origin = read_marker(config.cluster, config.app, config.after_query, partition, topic=origin_topic)
        if origin is None or origin.handed_over_to != config.query:
            raise CommitMarkerError(
                origin_topic, f"partition {partition}: query {config.after_query} did not hand over to {config.query}",
                fix="start the job with --after-query: its start hands over (the sink's prepare()) before any write",
            )  # fmt: skip
        if on_accepted_recreation(config, origin):  # the origin's offsets are of the old topic: start at 0 of this one
            return {}, Lineage(origin.writer_version, origin.cuts, config.after_query)
        check_markers(config, {partition: origin})
        return dict(origin.source_offsets), Lineage(origin.writer_version, origin.cuts, config.after_query)
    return dict(config.start_offsets), Lineage(started_after=config.after_query)


def on_accepted_recreation(config: SinkConfig, marker: CommitMarker) -> bool:
    """``marker`` names another id of the input, and the operator accepted this one as recreated (--input-recreated)."""
    recreated = bool(config.source_topic_id) and config.input_recreated == config.source_topic_id
    return recreated and marker.source_topic_id not in ("", config.source_topic_id)


def _producer(
    config: SinkConfig, transactional_id: str, refused: list[tuple[str, bytes | None, int]] | None = None
) -> Producer:
    """The sink's producer; with ``refused``, every record the broker refuses as too large is noted there."""
    batch = producer_batch_bytes(config)  # a batch of several records within every written topic's max.message.bytes
    extra: dict[str, Any] = {} if batch is None else {"batch.size": batch}
    if refused is not None:
        extra |= {"delivery.report.only.error": True, "on_delivery": functools.partial(_note_too_large, refused)}
    return Producer({
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
    })  # fmt: skip


def _note_too_large(refused: list[tuple[str, bytes | None, int]], error: KafkaError | None, message: Message) -> None:
    """Delivery report (errors only): a record the broker refused as too large, by topic, key and value size."""
    if error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        refused.append((str(message.topic()), message.key(), len(message.value() or b"")))


class RefusedAsTooLarge(Exception):
    """The broker (or the producer) refused output records of these input records as too large; nothing committed.

    ``error`` is the transaction's own failure, what the write raises when there is no DLQ topic to set them aside.
    """

    def __init__(self, origins: frozenset[Origin], error: TransactionError) -> None:
        super().__init__(f"{len(origins)} input records with an output refused as too large")
        self.origins = origins
        self.error = error


@dataclass
class _Writer:
    """A producer whose transactions are initialised, kept by a Python worker between batches.

    ``committed`` is what this producer knows for sure: its (query, partition)'s committed source
    offsets on each commits topic, read after ``init_transactions`` or committed by itself. It
    stays true while the producer is not fenced, and a fenced producer cannot commit anything, so
    a stale belief can only make a write fail (then a fresh producer re-reads the marker), never
    skip records that were not committed.
    """

    producer: Producer
    settings: tuple[Any, ...]
    token: str  # written to the owner file after init_transactions: see _owner_file
    committed: dict[str, dict[int, int]] = field(default_factory=dict)
    lineage: dict[str, Lineage] = field(default_factory=dict)  # per commits topic, as ``committed``
    refused: list[tuple[str, bytes | None, int]] = field(default_factory=list)  # this transaction's, _note_too_large


# Per Python worker process (Spark reuses workers across tasks and batches): one initialised
# producer per transactional.id, so a batch costs one transaction, not a producer, an
# init_transactions and a marker read. Bounded; the oldest is closed when a new one would exceed it.
_writers: OrderedDict[tuple[str, str], _Writer] = OrderedDict()
MAX_CACHED_PRODUCERS = 16


def _settings(config: SinkConfig) -> tuple[Any, ...]:
    return (config.transaction_timeout_ms, tuple(sorted(config.producer_config.items())), producer_batch_bytes(config))


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
    writer = _writers.get((config.cluster.bootstrap_servers, transactional_id))
    if writer is None:
        return None
    if writer.settings != _settings(config) or not _still_owner(
        config.cluster.bootstrap_servers, transactional_id, writer.token
    ):
        _discard(config, transactional_id)
        return None
    _writers.move_to_end((config.cluster.bootstrap_servers, transactional_id))
    return writer


def _fresh_writer(config: SinkConfig, transactional_id: str, partition: int) -> _Writer:
    """A new producer: ``init_transactions`` fences every older one, then the marker says where we are."""
    _discard(config, transactional_id)
    deadline = config.retry_deadline_s
    refused: list[tuple[str, bytes | None, int]] = []
    producer = _producer(config, transactional_id, refused)
    call_with_retries(
        transactional_id, "init_transactions", lambda: producer.init_transactions(deadline), deadline_s=deadline
    )
    writer = _Writer(producer, _settings(config), _claim(config.cluster.bootstrap_servers, transactional_id))
    writer.refused = refused
    _writers[(config.cluster.bootstrap_servers, transactional_id)] = writer
    while len(_writers) > MAX_CACHED_PRODUCERS:
        _discard_key(next(iter(_writers)))
    writer.committed[config.commits_topic], writer.lineage[config.commits_topic] = _committed_offsets(config, partition)
    return writer


def _discard(config: SinkConfig, transactional_id: str) -> None:
    _discard_key((config.cluster.bootstrap_servers, transactional_id))


def _discard_key(key: tuple[str, str]) -> None:
    writer = _writers.pop(key, None)
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


def write_partition(config: SinkConfig, batch_id: int, partition: int, records: Sequence[Record]) -> PartitionResult:
    """(query, batch_id, partition)'s ``records``, in their final order, as one or more transactions; on an executor.

    No size stops the write: a record too large for its topic is set aside as a dead letter first
    (``set_aside_too_large``), and a batch of more than ``max_transaction_bytes`` is written as
    several transactions, each with its own marker, cut only between input records
    (``transaction_chunks``). A crash between two of them leaves the first committed and marked:
    the re-run leaves those records out and writes the rest. A record the broker refuses as too
    large all the same (its topic's ``max.message.bytes`` lowered since it was read) aborts its
    transaction; the write re-reads the limits of the topics it writes and starts again: with new
    limits, what they say is too large is set aside; with the same, the refused input records are
    (the broker's word over ours). Each round reads new limits (``MAX_REFUSAL_ROUNDS`` times at
    most) or sets aside at least one more input record, else the refusal is final
    (``RefusedWithinLimits``): no record makes it loop.
    """
    if not records:  # nothing to vouch for: no producer, no transaction
        return PartitionResult(partition, batch_id, 0, skipped=False)
    refused: frozenset[Origin] = frozenset()
    results: list[PartitionResult] = []
    rounds = 0  # with new limits read
    while True:
        earlier = sum(r.records for r in results)  # committed by earlier rounds: this one finds them committed
        first = len(results)
        try:
            chunks = transaction_chunks(set_aside_too_large(config, records, refused), config.max_transaction_bytes)
            for chunk in chunks:
                results.append(_write_transaction(config, batch_id, partition, chunk))
        except RefusedAsTooLarge as refusal:
            if not config.dlq_topic:  # nowhere to set them aside: the batch fails as the broker or producer said
                raise refusal.error from refusal
            topics = {*(r[0] for r in records), *([config.dlq_topic] if config.dlq_topic else [])}
            admin = AdminClient(config.cluster.client_config())
            limits = {**config.topic_max_message_bytes, **read_topic_limits(admin, topics, config.retry_deadline_s)}
            if limits != dict(config.topic_max_message_bytes) and rounds < MAX_REFUSAL_ROUNDS:
                rounds += 1
                config = dataclasses.replace(config, topic_max_message_bytes=limits)  # they decide what is too large
            elif refusal.origins <= refused:
                raise RefusedWithinLimits(config.transactional_id(partition), refusal.origins, limits) from None
            else:  # refused within the limits as read: those input records are set aside all the same
                refused |= refusal.origins
            sys.stderr.write(
                f"transactional.id {config.transactional_id(partition)}: {len(refusal.origins)} input records refused "
                f"as too large; max.message.bytes read again ({limits}), writing them as dead letters\n"
            )
            continue
        result = combined_result(partition, batch_id, results[first:])
        return dataclasses.replace(
            result, records=result.records + earlier, already_committed=max(result.already_committed - earlier, 0),
            new_producer=any(r.new_producer for r in results), seconds=sum(r.seconds for r in results),
        )  # fmt: skip


def combined_result(partition: int, batch_id: int, results: Sequence[PartitionResult]) -> PartitionResult:
    """What a partition's transactions did, together."""
    return PartitionResult(
        partition, batch_id, sum(r.records for r in results), skipped=all(r.skipped for r in results),
        already_committed=sum(r.already_committed for r in results),
        new_producer=any(r.new_producer for r in results), seconds=sum(r.seconds for r in results),
    )  # fmt: skip


MAX_REFUSAL_ROUNDS = 8  # rounds of one write_partition that read new limits: limits that keep changing end it


class RefusedWithinLimits(IkkaiError):
    """The brokers refuse records as too large although they are within the max.message.bytes read for their topics."""

    def __init__(self, transactional_id: str, origins: frozenset[Origin], limits: Mapping[str, int]) -> None:
        shown = ", ".join(f"{p}/{o}" for p, o in sorted(origins)[:5])
        super().__init__(
            f"transactional.id {transactional_id}: the brokers refuse the dead letters of input records {shown} as "
            f"too large, within the max.message.bytes read for their topics ({dict(limits)})",
            fix="a compressed batch larger than its records, or a broker limit below the topic's: set no "
            "compression.type for the sink's producer, or raise the topic's max.message.bytes (kafka-configs.sh "
            "--alter --entity-type topics --entity-name <topic> --add-config max.message.bytes=<bytes>); the job "
            "goes on where it stopped",
        )
        self.transactional_id, self.origins = transactional_id, origins


def _write_transaction(config: SinkConfig, batch_id: int, partition: int, records: Sequence[Record]) -> PartitionResult:
    """One transaction for (query, batch_id, partition).

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


def uncommitted(
    records: Sequence[Record], committed: Mapping[int, int], origin: OriginLayout | None = None
) -> tuple[list[Record], dict[int, int]]:
    """The records to write, and the source offsets once they are committed too.

    To write: at or beyond the committed source offsets, and not committed by the ``origin`` of another
    layout (``grown_layout``). The offsets cover the origin's records too: they are in the output.
    """
    pending = [r for r in records if r[6] >= committed.get(r[5], 0)]
    covered = dict(committed)
    for record in pending:
        covered[record[5]] = max(covered.get(record[5], 0), record[6] + 1)
    return not_held(pending, origin), covered


def record_start(config: SinkConfig, partition: int) -> bool:
    """Write ``partition``'s start as a marker of its own (no record) unless it has one; whether it wrote one.

    A query that starts after another (``--after-query``, across a grown layout or not) or at
    ``--start-offsets`` computes each output partition's start (``_committed_offsets``); a partition
    that then gets no record keeps no marker, and a query that later takes over from this one would
    start it at offset 0 and write again what was committed before. Called at the start, before any
    batch: ``init_transactions`` first (fencing any earlier writer of the id), then the marker is read.
    """
    txn_id = config.transactional_id(partition)
    writer = _fresh_writer(config, txn_id, partition)
    try:
        own = read_marker(config.cluster, config.app, config.query, partition, topic=config.commits_topic)
        if own is not None or not any(writer.committed[config.commits_topic].values()):
            return False
        _write(config, writer, -1, partition, (), mark=True)
        return True
    finally:
        _discard(config, txn_id)


def _write(
    config: SinkConfig, writer: _Writer, batch_id: int, partition: int, records: Sequence[Record], mark: bool = False
) -> PartitionResult:
    committed = writer.committed.get(config.commits_topic)
    if committed is None:  # this producer has not read this commits topic yet (another query's writer)
        committed, writer.lineage[config.commits_topic] = _committed_offsets(config, partition)
        writer.committed[config.commits_topic] = committed
    pending, covered = uncommitted(records, committed, config.origin_layout)
    if not pending and covered == committed and not mark:
        return PartitionResult(partition, batch_id, 0, skipped=True, already_committed=len(records))
    # Records past the marker that the origin of another layout holds, all of them: nothing to write, but the marker
    # moves past them in a transaction of its own, else a query that takes over from this one (same layout, so no
    # origin to filter by) would start below them and write them again. ``mark``: the start alone (record_start).
    producer, txn_id, deadline = writer.producer, config.transactional_id(partition), config.retry_deadline_s
    writer.refused.clear()
    call_with_retries(txn_id, "begin_transaction", producer.begin_transaction, deadline_s=deadline)
    try:
        try:
            for record in pending:
                topic, key, value, timestamp, headers, source_partition, source_offset = record
                try:
                    _produce(producer, topic, key, value, partition, timestamp, headers)
                except KafkaException as exc:  # over the producer's own message.max.bytes: set aside, write again
                    if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                        raise
                    writer.refused.append((topic, key, len(value or b"")))
                    _abort(producer, txn_id, deadline)
                    error = exc.args[0]
                    failure = TransactionError(txn_id, "produce", error, classify(error), fix=_PRODUCE_FIX)
                    raise RefusedAsTooLarge(frozenset({(source_partition, source_offset)}), failure) from exc
            # A new writer_version takes over from the offsets committed so far: older decisions keep theirs.
            lineage = writer.lineage.get(config.commits_topic, Lineage()).written_by(
                config.writer_version, batch_id, committed
            )
            marker = CommitMarker(
                config.app, config.query, partition, batch_id, config.partitions, len(pending),
                config.source_topic, covered, output_topics=config.output_topics, writer_version=lineage.version,
                cuts=lineage.cuts, started_after=lineage.started_after,
            )  # fmt: skip
            marker = dataclasses.replace(marker, source_topic_id=config.source_topic_id)  # which input, by id
            _produce(producer, config.commits_topic, marker.key, marker.encode(default_codec()), partition, None)
        except KafkaException as exc:  # produce() itself refused: fatal (fenced) or the transaction must abort
            error = exc.args[0]
            kind = classify(error)
            raise TransactionError(txn_id, "produce", error, kind, fix=_PRODUCE_FIX) from exc
        with pause_before_commit(producer, config.query, partition, batch_id):
            call_with_retries(
                txn_id, "commit_transaction", lambda: producer.commit_transaction(deadline), deadline_s=deadline
            )
    except TransactionError as exc:
        if exc.kind is ErrorKind.ABORT:
            _abort(producer, txn_id, deadline)
            producer.poll(0)  # delivery reports not served yet: a record refused as too large among them
        origins = _origins(writer.refused, pending)
        if origins:  # the broker refused records as too large: written again with them set aside (write_partition)
            raise RefusedAsTooLarge(origins, exc) from exc
        raise
    writer.committed[config.commits_topic] = covered
    writer.lineage[config.commits_topic] = lineage
    left_out = len(records) - len(pending)
    return PartitionResult(partition, batch_id, len(pending), skipped=False, already_committed=left_out)


_PRODUCE_FIX = "the transaction was not committed; Spark retries the attempt, a fenced producer is discarded"


def _abort(producer: Producer, txn_id: str, deadline: float) -> None:
    call_with_retries(txn_id, "abort_transaction", lambda: producer.abort_transaction(deadline), deadline_s=deadline)


def _origins(refused: Sequence[tuple[str, bytes | None, int]], records: Sequence[Record]) -> frozenset[Origin]:
    """The input records of ``records`` whose output matches a refused record (topic, key, value size)."""
    if not refused:
        return frozenset()
    marks = set(refused)
    return frozenset((r[5], r[6]) for r in records if (r[0], r[1], len(r[2] or b"")) in marks)


# Fault injection for tests, in the spirit of the jobs' --crash-after-batch: the folder a test watches. Executors of a
# cluster get it through spark.executorEnv.IKKAI_FAULT_PAUSE_BEFORE_COMMIT; nothing else ever sets it.
PAUSE_BEFORE_COMMIT = "IKKAI_FAULT_PAUSE_BEFORE_COMMIT"
PAUSE_BOUND_S = 300.0  # a paused write goes on by itself after this long, released or not


@contextlib.contextmanager
def pause_before_commit(producer: Producer, query: str, partition: int, batch_id: int) -> Iterator[None]:
    """Test-only: hold the first transaction that gets here open, its records on the brokers, until released.

    Off (one environment lookup) unless ``$IKKAI_FAULT_PAUSE_BEFORE_COMMIT`` names a folder. Then
    the first write to get here claims ``claimed`` in it (``O_EXCL``: every later write, the retry
    of this one included, runs straight through), flushes its records, writes ``paused`` (JSON:
    query, partition, batch, pid) and waits until ``release`` exists, ``PAUSE_BOUND_S`` at most,
    before it commits. ``outcome`` then says how that commit ended: committed, or the error.
    """
    folder = os.environ.get(PAUSE_BEFORE_COMMIT)
    if not folder:
        yield
        return
    here = Path(folder)
    try:
        os.close(os.open(here / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:  # another write paused already: this one is not the fault
        yield
        return
    producer.flush(PAUSE_BOUND_S)  # the transaction is open on the brokers, not only in this process
    _write_json(here / "paused", {"query": query, "partition": partition, "batch": batch_id, "pid": os.getpid()})
    give_up_at = time.monotonic() + PAUSE_BOUND_S
    while not (here / "release").exists() and time.monotonic() < give_up_at:
        time.sleep(0.1)
    try:
        yield
    except BaseException as exc:
        kind = exc.kind.value if isinstance(exc, TransactionError) else ""
        _write_json(here / "outcome", {"committed": False, "kind": kind, "error": str(exc)})
        raise
    _write_json(here / "outcome", {"committed": True})


def _write_json(path: Path, content: Mapping[str, Any]) -> None:
    """``content`` as ``path``, whole or not at all: a watcher never reads half of it."""
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.write_text(json.dumps(content))
    os.replace(staged, path)

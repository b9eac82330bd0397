"""Exactly-once from Spark to Kafka: one Kafka transaction per (query, micro-batch N, partition p).

Use ``TransactionalBatchWriter`` as a ``foreachBatch`` function. The batch DataFrame holds the
output records as columns ``topic`` (string), ``key`` (binary, never null), ``value`` (binary),
``timestamp`` (epoch millis or null), optionally ``headers`` (map<string,string> or null: Kafka
record headers, e.g. a dead letter's reason) and the ``order_by`` columns, which must order a
batch's rows totally (e.g. input partition, input offset, output topic).

How it stays exactly-once (DESIGN.md, "Exactly-once from Spark to Kafka"):
- The Kafka source decides what batch N contains (its offset log); a re-run reads the same.
- Rows go to Spark partition p = Kafka's default partition of their key, and Spark partition p
  writes only to Kafka partition p of every output topic. So each Kafka partition has exactly
  one writer per batch, its records sorted by ``order_by``: a re-run or a replay produces the
  same bytes in the same order, whatever the batch boundaries were. The routing stays in Arrow
  and the JVM: ``mapInArrow`` adds each row's route (murmur2 of the key, vectorized), Spark's
  ``repartition`` + ``sortWithinPartitions`` move and order the rows, and a second
  ``mapInArrow`` writes. Every row is checked to be in the Spark partition of its Kafka partition.
- Partition p of batch N is one transaction of a producer with the stable ``transactional.id``
  ``<app>.<query>.<p>``. A fresh producer's ``init_transactions()`` fences any older instance and
  aborts its open transaction; then the last committed batch of (query, p) is read from
  ``_ikkai.commits`` (read_committed). If it is >= N the partition is skipped. Otherwise the
  records and the new marker ``(query, p) -> N`` are written and committed together.
- The Python worker keeps that producer for the next batches (Spark reuses workers) and knows
  the last committed batch from its own commits, so a steady batch costs one transaction. A kept
  producer that another worker or instance fenced in between fails its transaction, which
  writes nothing; the write then starts anew with a fresh producer, which re-reads the marker.
- The layout is pinned: every output topic must have exactly ``partitions`` partitions and every
  marker must have been written with the same number; anything else stops the job, because a
  different layout would re-write committed records under new marker keys.
- Speculative execution would run two attempts of one partition at once, fencing each other
  at best: the writer refuses to run with it on.

``transaction.timeout.ms`` defaults to 60 s. It bounds how long read_committed readers (and the
marker read of other partitions) stall behind a writer that died mid-transaction and never comes
back; a restarted writer fences it at once. It must exceed the time one partition of one batch
takes to write and commit, or the broker aborts healthy transactions: keep batches small enough
(``maxOffsetsPerTrigger``) to write in well under a minute. A task's marker read waits until no
transaction is open on ``_ikkai.commits``; after a crash, the dead job's open transactions are
fenced by the restarted job's tasks of the same partitions, so run at least as many task slots as
partitions, or the first batch after a crash may wait up to ``transaction.timeout.ms``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import sys
import tempfile
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ikkai.errors import ConfigError
from spark_jobs.commit_markers import (
    COMMITS_PARTITION,
    COMMITS_TOPIC,
    CommitMarker,
    CommitMarkerError,
    ensure_commits_topic,
    marker_key,
    read_markers,
)
from spark_jobs.kafka_errors import ErrorKind, TransactionError, call_with_retries, classify
from spark_jobs.kafka_partitioning import kafka_partitions, spark_partition_routes
from spark_jobs.serialization import default_codec

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

OUTPUT_COLUMNS = ("topic", "key", "value", "timestamp")
HEADERS_COLUMN = "headers"  # optional: map<string,string>, written as Kafka record headers (UTF-8 values)
ROUTE_COLUMN = "_ikkai_route"
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


class TransactionalBatchWriter:
    """``foreachBatch`` function writing each batch exactly once (see the module docstring)."""

    def __init__(
        self,
        config: SinkConfig,
        *,
        progress: TextIO = sys.stderr,
        after_batch: Callable[[int, list[PartitionResult]], None] | None = None,
    ) -> None:
        self.config = config
        self.progress = progress
        self.after_batch = after_batch
        self._prepared = False
        self._routes: tuple[int, ...] | None = None
        self._admin: AdminClient | None = None

    def prepare(self, spark: SparkSession) -> None:
        """Checks before the query starts: speculation off, commits topic present, layout unchanged."""
        refuse_speculation(spark)
        ensure_commits_topic(self.config.bootstrap_servers, self.config.commits_topic)
        self._admin = AdminClient({"bootstrap.servers": self.config.bootstrap_servers})
        check_layout(self.config, self._admin)
        self._routes = spark_partition_routes(self.config.partitions)
        self._prepared = True

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if not self._prepared or self._routes is None:
            self.prepare(batch.sparkSession)
        else:  # the markers are checked by the writers that read them
            refuse_speculation(batch.sparkSession)
            check_topics(self.config, self._admin)
        assert self._routes is not None
        config, routes = self.config, self._routes
        headers = [HEADERS_COLUMN] if HEADERS_COLUMN in batch.columns else []
        rows = batch.select(*OUTPUT_COLUMNS, *headers, *config.order_by)
        routed = rows.mapInArrow(functools.partial(route_batches, routes=routes), _with_route(rows.schema))
        ordered = routed.repartition(config.partitions, ROUTE_COLUMN).sortWithinPartitions(*config.order_by)
        write = functools.partial(write_batches, config=config, batch_id=batch_id, routes=routes)
        collected = sorted(
            (PartitionResult(**row.asDict()) for row in ordered.mapInArrow(write, RESULT_SCHEMA).collect()),
            key=lambda r: r.partition,
        )
        if not collected:  # adaptive execution saw an empty shuffle and ran no write task: nothing to write
            collected = [PartitionResult(p, batch_id, 0, skipped=False) for p in range(config.partitions)]
        if [r.partition for r in collected] != list(range(config.partitions)):
            raise CommitMarkerError(config.commits_topic, "Spark changed the partition layout", fix="report this bug")
        written = sum(r.records for r in collected)
        skipped = [r.partition for r in collected if r.skipped]
        self.progress.write(
            f"{config.query}: batch {batch_id} committed {written} records"
            + (f" (partitions {skipped} already committed)" if skipped else "")
            + "\n"
        )
        self.progress.flush()
        if self.after_batch is not None:
            self.after_batch(batch_id, collected)


def refuse_speculation(spark: SparkSession) -> None:
    if str(spark.conf.get("spark.speculation", "false")).lower() == "true":
        raise ConfigError(
            "spark",
            "spark.speculation",
            "is on; two attempts of one partition would write the same transaction at once",
            fix="set spark.speculation=false for jobs that use the transactional sink",
        )


def check_layout(config: SinkConfig, admin: AdminClient | None = None) -> None:
    """Fail unless every output topic has ``partitions`` partitions and every marker agrees."""
    check_topics(config, admin)
    check_markers(
        config,
        read_markers(
            config.bootstrap_servers, config.app, config.query, topic=config.commits_topic,
            wait_for_open_transactions=False,
        ),
    )  # fmt: skip


def check_topics(config: SinkConfig, admin: AdminClient | None = None) -> None:
    """Fail unless every output topic exists with ``partitions`` partitions."""
    client = admin or AdminClient({"bootstrap.servers": config.bootstrap_servers})
    topics = client.list_topics(timeout=30).topics
    for topic in config.output_topics:
        if topic not in topics:
            raise CommitMarkerError(
                topic, "the output topic does not exist", fix="create it (topics are never auto-created)"
            )
        count = len(topics[topic].partitions)
        if count != config.partitions:
            raise CommitMarkerError(
                topic,
                f"has {count} partitions but the job writes {config.partitions}",
                fix="give every output topic the job's partition count; a changed layout needs a new query name",
            )


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


def _with_route(schema: StructType) -> StructType:
    from pyspark.sql.types import IntegerType, StructField, StructType

    return StructType([*schema.fields, StructField(ROUTE_COLUMN, IntegerType(), nullable=False)])


def route_batches(batches: Iterator[pa.RecordBatch], routes: tuple[int, ...]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: append each row's route, the value that sends it to Spark partition = its Kafka partition."""
    import pyarrow as pa  # type: ignore[import-untyped]

    table = pa.array(routes, type=pa.int32())
    for chunk in batches:
        keys = chunk.column("key").to_pylist()
        if any(key is None for key in keys):
            raise ConfigError("sink", "key", "a row has no key", fix="every output record needs a key to route it")
        partitions = kafka_partitions(keys, len(routes))
        yield chunk.append_column(ROUTE_COLUMN, table.take(pa.array(partitions)))


def write_batches(
    batches: Iterator[pa.RecordBatch], config: SinkConfig, batch_id: int, routes: tuple[int, ...]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` after the repartition and sort: Spark partition p, written as one transaction."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else -1
    chunks = list(batches)
    if not 0 <= partition < config.partitions or any(
        not pc.all(pc.equal(chunk.column(ROUTE_COLUMN), routes[partition])).as_py() for chunk in chunks if len(chunk)
    ):
        raise CommitMarkerError(config.commits_topic, "Spark changed the partition layout", fix="report this bug")
    records = [
        record
        for chunk in chunks
        for record in zip(
            chunk.column("topic").to_pylist(),
            chunk.column("key").to_pylist(),
            chunk.column("value").to_pylist(),
            chunk.column("timestamp").to_pylist(),
            chunk.column(HEADERS_COLUMN).to_pylist() if HEADERS_COLUMN in chunk.schema.names else [None] * len(chunk),
            strict=True,
        )
    ]
    result = write_partition(config, batch_id, partition, records)
    yield pa.RecordBatch.from_pylist([dataclasses.asdict(result)], schema=_RESULT_ARROW_SCHEMA)


RESULT_SCHEMA = "partition int, batch_id long, records long, skipped boolean"


def _result_arrow_schema() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.schema([("partition", pa.int32()), ("batch_id", pa.int64()), ("records", pa.int64()),
                      ("skipped", pa.bool_())])  # fmt: skip


_RESULT_ARROW_SCHEMA = _result_arrow_schema()


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
    txn_id = config.transactional_id(partition)
    writer = _cached_writer(config, txn_id)
    if writer is not None:
        try:
            return _write(config, writer, batch_id, partition, records)
        except TransactionError as exc:
            _discard(config, txn_id)
            if exc.kind is not ErrorKind.FATAL:
                raise
            sys.stderr.write(f"transactional.id {txn_id}: producer was fenced since its last commit, starting anew\n")
        except BaseException:
            _discard(config, txn_id)
            raise
    try:
        return _write(config, _fresh_writer(config, txn_id, partition), batch_id, partition, records)
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


class AtLeastOnceBatchWriter:
    """Spark's built-in Kafka sink, as a ``foreachBatch`` function: the benchmark baseline only.

    A batch re-run after a crash writes its records again: duplicates are expected here.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        progress: TextIO = sys.stderr,
        after_batch: Callable[[int, list[PartitionResult]], None] | None = None,
        query: str = "alos",
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.progress = progress
        self.after_batch = after_batch
        self.query = query

    def prepare(self, spark: SparkSession) -> None:
        """Nothing to check: the baseline makes no exactly-once promise."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        columns = [F.col("topic"), F.col("key"), F.col("value")]
        if HEADERS_COLUMN in batch.columns:  # Spark's sink wants array<struct<key string, value binary>>
            entry = lambda e: F.struct(e["key"].alias("key"), e["value"].cast("binary").alias("value"))  # noqa: E731
            columns.append(F.transform(F.map_entries(HEADERS_COLUMN), entry).alias(HEADERS_COLUMN))
        batch.select(*columns).write.format("kafka").option("kafka.bootstrap.servers", self.bootstrap_servers).save()
        self.progress.write(f"{self.query}: batch {batch_id} written (at-least-once)\n")
        self.progress.flush()
        if self.after_batch is not None:
            self.after_batch(batch_id, [])

"""Exactly-once from Spark to Kafka: one Kafka transaction per (query, micro-batch N, partition p).

Use ``TransactionalBatchWriter`` as a ``foreachBatch`` function. The batch DataFrame holds the
output records as columns ``topic`` (string), ``key`` (binary, never null), ``value`` (binary),
``timestamp`` (epoch millis or null) and the ``order_by`` columns, which must order a batch's
rows totally (e.g. input partition, input offset, output topic).

How it stays exactly-once (DESIGN.md, "Exactly-once from Spark to Kafka"):
- The Kafka source decides what batch N contains (its offset log); a re-run reads the same.
- Rows go to Spark partition p = Kafka's default partition of their key, and Spark partition p
  writes only to Kafka partition p of every output topic. So each Kafka partition has exactly
  one writer per batch, its records sorted by ``order_by``: a re-run or a replay produces the
  same bytes in the same order, whatever the batch boundaries were.
- Partition p of batch N is one transaction of a producer with the stable ``transactional.id``
  ``<app>.<query>.<p>``. ``init_transactions()`` fences any older instance and aborts its open
  transaction; then the last committed batch of (query, p) is read from ``_ikkai.commits``
  (read_committed); if it is >= N the partition is skipped. Otherwise the records and the new
  marker ``(query, p) -> N`` are written and committed together.
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

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from confluent_kafka import Producer
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
from spark_jobs.kafka_errors import ErrorKind, TransactionError, call_with_retries
from spark_jobs.kafka_partitioning import kafka_partition
from spark_jobs.serialization import default_codec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OUTPUT_COLUMNS = ("topic", "key", "value", "timestamp")
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

    def prepare(self, spark: SparkSession) -> None:
        """Checks before the query starts: speculation off, commits topic present, layout unchanged."""
        refuse_speculation(spark)
        ensure_commits_topic(self.config.bootstrap_servers, self.config.commits_topic)
        check_layout(self.config)
        self._prepared = True

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if not self._prepared:
            self.prepare(batch.sparkSession)
        else:
            refuse_speculation(batch.sparkSession)
            check_layout(self.config)
        config = self.config
        columns = [*OUTPUT_COLUMNS, *config.order_by]
        routed = batch.select(*columns).rdd.map(lambda row: (kafka_partition(bytes(row[1]), config.partitions), row))
        partitioned = routed.partitionBy(config.partitions, lambda p: p)
        if partitioned.getNumPartitions() != config.partitions:
            raise CommitMarkerError(config.commits_topic, "Spark changed the partition layout", fix="report this bug")
        results = partitioned.mapPartitionsWithIndex(lambda p, rows: [write_partition(config, batch_id, p, rows)])
        collected: list[PartitionResult] = sorted(results.collect(), key=lambda r: r.partition)
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


def check_layout(config: SinkConfig) -> None:
    """Fail unless every output topic has ``partitions`` partitions and every marker agrees."""
    topics = AdminClient({"bootstrap.servers": config.bootstrap_servers}).list_topics(timeout=30).topics
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
    markers = read_markers(
        config.bootstrap_servers, config.app, config.query, topic=config.commits_topic, wait_for_open_transactions=False
    )
    for marker in markers.values():
        if marker.partitions != config.partitions:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query} committed batch {marker.batch_id} with {marker.partitions} partitions, "
                f"now {config.partitions}",
                fix="keep the partition count, or start a new query name with a fresh checkpoint",
            )


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


def _produce(producer: Producer, topic: str, key: bytes, value: bytes | None, partition: int, ts: int | None) -> None:
    while True:
        try:
            if ts is None:
                producer.produce(topic, value=value, key=key, partition=partition)
            else:
                producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts)
            return
        except BufferError:  # local queue full: let deliveries drain, then try again
            producer.poll(0.1)


def write_partition(
    config: SinkConfig, batch_id: int, partition: int, rows: Iterable[tuple[int, Any]]
) -> PartitionResult:
    """One transaction for (query, batch_id, partition); runs on an executor."""
    txn_id = config.transactional_id(partition)
    deadline = config.retry_deadline_s
    ordered = sorted((row for _, row in rows), key=lambda row: tuple(row[len(OUTPUT_COLUMNS) :]))
    producer = _producer(config, txn_id)
    call_with_retries(txn_id, "init_transactions", lambda: producer.init_transactions(deadline), deadline_s=deadline)
    last = read_markers(config.bootstrap_servers, config.app, config.query, topic=config.commits_topic).get(partition)
    if last is not None and last.batch_id >= batch_id:
        return PartitionResult(partition, batch_id, 0, skipped=True)
    call_with_retries(txn_id, "begin_transaction", producer.begin_transaction, deadline_s=deadline)
    try:
        for topic, key, value, timestamp, *_ in ordered:
            _produce(producer, topic, bytes(key), None if value is None else bytes(value), partition, timestamp)
        marker = CommitMarker(config.app, config.query, partition, batch_id, config.partitions, len(ordered))
        _produce(producer, config.commits_topic, marker.key, marker.encode(default_codec()), COMMITS_PARTITION, None)
        call_with_retries(
            txn_id, "commit_transaction", lambda: producer.commit_transaction(deadline), deadline_s=deadline
        )
    except TransactionError as exc:
        if exc.kind is ErrorKind.ABORT:
            call_with_retries(
                txn_id, "abort_transaction", lambda: producer.abort_transaction(deadline), deadline_s=deadline
            )
        raise  # FATAL: the producer is dropped with this frame, never reused
    return PartitionResult(partition, batch_id, len(ordered), skipped=False)


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
        batch.select("topic", "key", "value").write.format("kafka").option(
            "kafka.bootstrap.servers", self.bootstrap_servers
        ).save()
        self.progress.write(f"{self.query}: batch {batch_id} written (at-least-once)\n")
        self.progress.flush()
        if self.after_batch is not None:
            self.after_batch(batch_id, [])

"""Exactly-once from Spark to Kafka: one Kafka transaction per (query, micro-batch N, partition p).

Use ``TransactionalBatchWriter`` as a ``foreachBatch`` function. The batch DataFrame holds the
output records as columns ``topic`` (string), ``key`` (binary, never null), ``value`` (binary),
``timestamp`` (epoch millis or null), optionally ``headers`` (map<string,string> or null: Kafka
record headers, e.g. a dead letter's reason) and the ``order_by`` columns, which must order a
batch's rows totally (e.g. input partition, input offset, output topic).

How it stays exactly-once (the protocol in docs/exactly-once.md):
- The Kafka source decides what batch N contains (its offset log); a re-run reads the same.
- Each Kafka partition p of the output has exactly one writer per batch, a Spark task that holds
  all of p's records, sorted by ``order_by``, and writes them as one transaction with p's marker
  (``partition_transactions.write_partition``: stable ``transactional.id`` per p, fencing; the
  marker holds the source offsets p's output covers, and records below them are left out as
  already committed). Every row names its input record (``source_columns``: input partition and
  offset of ``source_topic``). A re-run or a replay produces the same bytes in the same order,
  whatever the batch boundaries were. The task is found one of two ways:
  - **Routed** (the default): a row goes to Kafka's default partition of its key. ``mapInArrow``
    adds each row's route (murmur2 of the key, vectorized), Spark's ``repartition`` +
    ``sortWithinPartitions`` move and order the rows, and a second ``mapInArrow`` writes. Every
    row is checked to be in the Spark partition of its Kafka partition. This costs a shuffle and
    a second stage per batch.
  - **In place** (``partition_column`` set): the batch is already partitioned like its output.
    A job that reads one Kafka topic and has no shuffle before the sink gets one Spark task per
    input partition (Spark's Kafka source splits a partition only with ``minPartitions`` or
    ``maxRecordsPerPartition``, which the jobs never set); each row names its input partition in
    ``partition_column``, and the task writes its rows to that same partition of every output
    topic, in the stage that computed them. The task checks that its rows name exactly one
    partition; before any task writes, the driver checks that no two tasks hold one partition
    (``refuse_shared_partitions``: from the plan of a plain Kafka read, else by asking which
    partition each task's rows name), and again after the write. With input and
    output keyed alike and the input written by Kafka's default partitioner, this is the same
    partition the routed write picks; otherwise records follow their input's partition, and
    the batch's progress line counts them.
- A ``RowTransform`` (``transform=``) turns the batch's rows into the output rows inside the write
  task: written in place, one ``mapInArrow`` per task computes the rows and writes them, one
  Python worker and no second Arrow trip (the infer job's model runs this way). The transaction
  sees exactly the rows the transform yields, so the marker, the skip and the bytes are those of
  the same rows computed in an earlier ``mapInArrow``; a transform that fails, or a worker that
  dies, before the commit leaves nothing committed. Routed, and in Spark's own sink, the
  transform is an ordinary ``mapInArrow`` before the write.
- The layout is pinned: every output topic must have exactly ``partitions`` partitions and every
  marker must have been written with the same number; anything else stops the job, because a
  different layout would re-write committed records under new marker keys.
- Speculative execution would run two attempts of one partition at once, fencing each other
  at best: the writer refuses to run with it on.

``transaction.timeout.ms`` defaults to 60 s. It bounds how long downstream read_committed readers
stall behind a writer that died mid-transaction and never comes back; a restarted writer fences
it at once. It must exceed the time one partition of one batch
takes to write and commit, or the broker aborts healthy transactions: keep batches small enough
(``maxOffsetsPerTrigger``, bounded by default in ``spark_jobs.options``) to write in well under a minute.
A writer reads only its own partition of the query's commits topic, right after its
``init_transactions`` ended any transaction its predecessor left open there, so it never waits
for another partition's writer or another query's zombie (``commit_markers``).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO

from confluent_kafka.admin import AdminClient

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import spark_partition_routes
from spark_jobs.sink.commit_markers import CommitMarker, CommitMarkerError, ensure_commits_topic, read_markers
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.grown_layout import refuse_a_grown_layout, refuse_by_own_markers
from spark_jobs.sink.partition_transactions import PartitionResult
from spark_jobs.sink.shared_partitions import refuse_a_split_stream, refuse_shared_partitions
from spark_jobs.sink.start_checks import check_topics, refuse_speculation, with_topic_limits
from spark_jobs.sink.start_pass import start_as_owner
from spark_jobs.sink.write_tasks import (
    HEADERS_COLUMN,
    ROUTE_COLUMN,
    InPlaceWrite,
    RowTransform,
    collect_results,
    route_batches,
    with_route_column,
    write_batches,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "AtLeastOnceBatchWriter",
    "PartitionResult",
    "RowTransform",
    "SinkConfig",
    "TransactionalBatchWriter",
    "check_topics",
    "refuse_speculation",
    "start_as_owner",
    "with_topic_limits",
]

OUTPUT_COLUMNS = ("topic", "key", "value", "timestamp")
# Topic metadata (counts, existence, max.message.bytes) is read at start, then at most this often and after any
# failed write.
# A grown input is also refused by the write tasks themselves (a row outside the layout), at once.
TOPIC_CHECK_INTERVAL_S = 30.0


class TransactionalBatchWriter:
    """``foreachBatch`` function writing each batch exactly once (see the module docstring)."""

    def __init__(
        self,
        config: SinkConfig,
        *,
        progress: TextIO = sys.stderr,
        after_batch: Callable[[int, list[PartitionResult]], None] | None = None,
        transform: RowTransform | None = None,
    ) -> None:
        self.config = config
        self.progress = progress
        self.after_batch = after_batch
        self.transform = transform  # None: the batch's rows are the output rows
        self._prepared = False
        self._routes: tuple[int, ...] | None = None
        self._admin: AdminClient | None = None
        self._topics_checked_at = float("-inf")  # time.monotonic() of the last check_topics
        self._columns_checked = False  # the transform's output columns, analysed once (they cannot change)
        self._stream_checked = False  # the streaming plan refused a split once, at the start (check_stream)
        self._in_place = InPlaceWrite()  # the in-place write's mapInArrow, built once (its function pickled once)

    def prepare(self, spark: SparkSession) -> None:
        """Checks before the query starts: speculation off, commits topic present, layout unchanged, outputs claimed.

        The query's markers are read once, here, for every check of the start (``start``).
        """
        config = self.config
        self.start(spark, read_markers(config.cluster, config.app, config.query, topic=config.commits_topic))

    def start(self, spark: SparkSession, markers: Mapping[int, CommitMarker], rows: DataFrame | None = None) -> None:
        """``prepare`` over the query's ``markers`` as the start read them: its checks (``start_checks``), then its
        claim and writes (``start_pass.start_as_owner``); ``rows``:
        the streamed rows this writer gets as they are, their plan checked first (``check_stream``), so a split
        stream is refused before anything is written."""
        if rows is not None:
            self.check_stream(rows)
        # The checks before the claim, in the order the start refuses in: speculation, a grown layout (naming the query
        # that goes on) before any count, the commits topic, the topics' counts and limits; then the rest of what the
        # markers forbid (a marker's layout or input, a handover done, other topics): judged here, not by the claim.
        refuse_speculation(spark)
        self._admin = AdminClient(self.config.cluster.client_config())
        commits = self._admin.list_topics(self.config.commits_topic, timeout=30).topics.get(self.config.commits_topic)
        commits_partitions = None if commits is None or commits.error is not None else len(commits.partitions)
        refuse_a_grown_layout(self.config, markers, commits_partitions)  # a query without markers: by its topic's count
        ensure_commits_topic(self.config.cluster, self.config.commits_topic, self.config.partitions)
        check_topics(self.config, self._admin)
        self.config = with_topic_limits(self.config, self._admin)  # each written topic's max.message.bytes
        refuse_by_own_markers(self.config, markers)
        self.config = start_as_owner(self.config, markers)  # claimed; the recorded start; a handover's fencing
        self._routes = spark_partition_routes(self.config.partitions)
        self._topics_checked_at = time.monotonic()
        self._prepared = True

    def check_stream(self, rows: DataFrame) -> None:
        """The streaming plan whose micro-batches this writer gets as they are, checked once before the query starts.

        Written in place, no two Spark tasks of a batch may hold one Kafka partition
        (``refuse_a_split_stream``). A query's plan is fixed when it starts (its operators, its one
        Kafka source and that source's options), so the check cannot change its answer between
        batches; the batches then skip the per-batch check of their own plan (``refuse_shared_partitions``).
        Only for rows handed to the writer unchanged (the template's ``foreachBatch`` without a
        batch function of the job's own); the write still refuses two results for one partition after it.
        """
        if self.config.partition_column and not self._stream_checked:  # once: the plan cannot change
            refuse_a_split_stream(rows, self.config)
            self._stream_checked = True

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if not self._prepared or self._routes is None:
            self.prepare(batch.sparkSession)
        else:  # the markers are checked by the writers that read them
            # No speculation check here: prepare refused it, and spark.speculation is the SparkContext's (its task
            # scheduler reads it once; a session cannot set a core Spark setting): it cannot turn on mid-query.
            self._check_topics(every_s=TOPIC_CHECK_INTERVAL_S)
        assert self._routes is not None
        try:
            collected = self._write(batch, batch_id, self._routes)
        except Exception as failure:
            self.explain(failure)
            raise
        self._report(batch_id, collected, started)

    def explain(self, failure: BaseException) -> None:
        """A write failed: if the topics' metadata explains it (an input that grew, a topic deleted), raise that.

        The explanation names the procedure; the task's own error (e.g. a row outside the layout) does
        not. Metadata that cannot be read leaves the task's error to stand.
        """
        try:
            check_topics(self.config, self._admin, deadline_s=0.0)
        except CommitMarkerError as explained:
            raise explained from failure
        except Exception:  # noqa: BLE001, S110 - Kafka unreadable: the write's own failure is the one to report
            pass

    def _check_topics(self, every_s: float) -> None:
        """``check_topics``, at most once every ``every_s`` seconds: topic metadata is not read per batch."""
        if time.monotonic() - self._topics_checked_at >= every_s:
            check_topics(self.config, self._admin)
            assert self._admin is not None  # prepared
            self.config = with_topic_limits(self.config, self._admin)  # a limit changed since: followed from here on
            self._topics_checked_at = time.monotonic()

    def _write(self, batch: DataFrame, batch_id: int, routes: tuple[int, ...]) -> list[PartitionResult]:
        config = self.config
        if config.partition_column and self.transform is not None:  # computed and written in one mapInArrow per task
            if not self._columns_checked:  # the analysis of a plan no task runs: once, not per batch
                self._output_rows(self.transform.apply(batch))
                self._columns_checked = True
            return self._write_in_place(batch, batch_id)
        output = batch if self.transform is None else self.transform.apply(batch)
        rows = self._output_rows(output)
        if config.partition_column:
            return self._write_in_place(rows, batch_id)
        return self._write_routed(rows, batch_id, routes)

    def _output_rows(self, output: DataFrame) -> DataFrame:
        """The sink's columns of ``output``: Spark's analysis checks them here, on the driver, before any task runs."""
        config = self.config
        headers = [HEADERS_COLUMN] if HEADERS_COLUMN in output.columns else []
        column = config.partition_column
        extra = [c for c in (*config.source_columns, column) if c is not None and c not in config.order_by]
        return output.select(*OUTPUT_COLUMNS, *headers, *config.order_by, *dict.fromkeys(extra))

    def _report(self, batch_id: int, collected: list[PartitionResult], started: float) -> None:
        # the whole foreachBatch call: checks, compute, write, collect
        self.progress.write(batch_report(self.config.query, batch_id, collected, time.monotonic() - started))
        self.progress.flush()
        if self.after_batch is not None:
            self.after_batch(batch_id, collected)

    def _write_routed(self, rows: DataFrame, batch_id: int, routes: tuple[int, ...]) -> list[PartitionResult]:
        config = self.config
        routed = rows.mapInArrow(functools.partial(route_batches, routes=routes), with_route_column(rows.schema))
        ordered = routed.repartition(config.partitions, ROUTE_COLUMN).sortWithinPartitions(*config.order_by)
        collected = collect_results(
            ordered, functools.partial(write_batches, config=config, batch_id=batch_id, routes=routes)
        )
        if not collected:  # adaptive execution saw an empty shuffle and ran no write task: nothing to write
            collected = [PartitionResult(p, batch_id, 0, skipped=False) for p in range(config.partitions)]
        if [r.partition for r in collected] != list(range(config.partitions)):
            raise CommitMarkerError(config.commits_topic, "Spark changed the partition layout", fix="report this bug")
        return collected

    def _write_in_place(self, rows: DataFrame, batch_id: int) -> list[PartitionResult]:
        config = self.config
        transform = None if self.transform is None else self.transform.function
        if not self._stream_checked:  # checked once from the streaming plan, or here per batch, before any task writes
            refuse_shared_partitions(rows, batch_id, config, self.transform)
        collected = self._in_place.collect(rows, config, batch_id, transform)
        partitions = [r.partition for r in collected]
        if len(set(partitions)) != len(partitions):
            twice = sorted({p for p in partitions if partitions.count(p) > 1})
            raise CommitMarkerError(
                config.commits_topic,
                f"batch {batch_id}: partitions {twice} were written by more than one Spark task",
                fix=f"the batch was not partitioned by {config.partition_column}: a source read with minPartitions "
                "or maxRecordsPerPartition, or a shuffle before the sink; write it routed (no partition_column)",
            )
        return collected


def batch_report(query: str, batch_id: int, collected: list[PartitionResult], seconds: float) -> str:
    """A batch's progress line: what it committed, its slowest partition, and anything unusual. Pure."""
    written = sum(r.records for r in collected)
    skipped = [r.partition for r in collected if r.skipped]
    left_out = sum(r.already_committed for r in collected)
    outside = sum(r.outside_key_partition for r in collected)
    fresh = sum(r.new_producer for r in collected)
    slowest = max((r.seconds for r in collected), default=0.0)
    return (
        f"{query}: batch {batch_id} committed {written} records, slowest partition {slowest:.2f} s of {seconds:.2f} s"
        + (f" ({fresh} new producer{'s' * (fresh != 1)})" if fresh else "")
        + (f" (partitions {skipped} already committed)" if skipped else "")
        + (f" ({left_out} records left out: committed before)" if left_out else "")
        + (f" ({outside} in their input's partition, not their key's)" if outside else "")
        + "\n"
    )


class AtLeastOnceBatchWriter:
    """Spark's built-in Kafka sink, as a ``foreachBatch`` function: the benchmark baseline only.

    A batch re-run after a crash writes its records again: duplicates are expected here.
    """

    def __init__(
        self,
        cluster: KafkaContext,
        *,
        progress: TextIO = sys.stderr,
        after_batch: Callable[[int, list[PartitionResult]], None] | None = None,
        query: str = "alos",
        transform: RowTransform | None = None,
    ) -> None:
        self.cluster = cluster
        self.progress = progress
        self.after_batch = after_batch
        self.query = query
        self.transform = transform

    def prepare(self, spark: SparkSession) -> None:
        """Nothing to check: the baseline makes no exactly-once promise."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        started = time.monotonic()
        if self.transform is not None:
            batch = self.transform.apply(batch)
        columns = [F.col("topic"), F.col("key"), F.col("value")]
        if HEADERS_COLUMN in batch.columns:  # Spark's sink wants array<struct<key string, value binary>>
            entry = lambda e: F.struct(e["key"].alias("key"), e["value"].cast("binary").alias("value"))  # noqa: E731
            columns.append(F.transform(F.map_entries(HEADERS_COLUMN), entry).alias(HEADERS_COLUMN))
        batch.select(*columns).write.format("kafka").options(**self.cluster.spark_options()).save()
        self.progress.write(
            f"{self.query}: batch {batch_id} written in {time.monotonic() - started:.2f} s (at-least-once)\n"
        )
        self.progress.flush()
        if self.after_batch is not None:
            self.after_batch(batch_id, [])

"""The streaming-job template: the start sequence and the exactly-once wiring, once.

A job (enrich, infer) parses its options (``spark_jobs.options``: pure, nothing touched yet), then
supplies its name, the topic that pins its partition layout, and a ``BatchPlan`` once the partition
count is known: what it writes, what decides its output (``writer_version``), how the Kafka source
becomes the streamed rows and what runs per micro-batch. The template does the rest, in this order::

    opened (streaming_options: the cluster resolved and checked, --create-topics, the source's settings) →
    the session → pinned_partitions → the job's plan → sink_api → kafka_source → sink_config → the trigger →
    prepare_sink → attached, started

The template's own steps come first, then each floor below once: ``opened`` before the session, and in
``start_query`` the Spark source, then the sink's start.

``prepare_sink`` (``sink.query_start``) is the sink's whole side of the start, in one pass down the sink's
floors: the input by topic id, a rebase on a recreated input, the writer, and its checks and claim
over the markers it reads once.

The sink is attached one of two ways: through ``foreachBatch`` (the default), or, for a job whose rows
are written in place with the sink's transform (infer) and ``--sink-api data-source``, through a
Python data source's stream writer (``stream_writer``: per-task write, driver commit, no driver
callback per batch; ``sink_api`` says why it is not the default). An ``IkkaiError`` raised inside a
batch reaches the driver wrapped in Spark's ``StreamingQueryException`` (a page of JVM and Python
traceback); the template raises the ``IkkaiError`` itself instead, so the job prints its one line
and exits 1 (``main_entry``).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka.admin import AdminClient

from ikkai.contract import kafka
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.wire_format import environment_codec
from ikkai.errors import ConfigError, IkkaiError
from spark_jobs.options import (
    DATA_SOURCE,
    FOREACH_BATCH,
    default_max_transaction_bytes,
    stream_trigger,
)
from spark_jobs.sink.query_start import EXACTLY_ONCE, AfterBatch, BatchWriter, SinkStart, prepare_sink
from spark_jobs.sink.transactional_sink import (
    PartitionResult,
    RowTransform,
    SinkConfig,
    TransactionalBatchWriter,
)
from spark_jobs.streaming_options import StreamingOptions as StreamingOptions  # what the template runs with
from spark_jobs.streaming_options import replay_options as replay_options  # a replay's

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from spark_jobs.replay_query import ReplayRequest

BatchFunction = Callable[["DataFrame", int], None]


def _identity(writer: BatchWriter) -> BatchFunction:
    return writer


@dataclass(frozen=True)
class BatchPlan:
    """A job's part of the start, once its partition count is known."""

    output_topics: tuple[str, ...]
    dlq_topic: str
    order_by: tuple[str, ...]
    writer_version: str  # what decides the output besides the input: a change is a cutover the markers record
    rows: Callable[[DataFrame], DataFrame]  # the Kafka source → the rows each micro-batch gets
    batch_function: Callable[[BatchWriter], BatchFunction] = _identity  # the sink's writer → foreachBatch's function
    transform: RowTransform | None = None  # run inside the sink's write task (infer's model)
    partition_column: str | None = None  # rows already in their output partition: written in place
    outputs_follow_input: bool = False  # routed, but every output key maps to its input record's partition (enrich)
    output_mode: str | None = None  # "update" for a stateful job


class StreamingJob(Protocol):
    """What a job gives the template."""

    @property
    def name(self) -> str:
        """The job in refusals and the dead letters' stage: enrich, infer."""

    @property
    def layout_topic(self) -> str:
        """The output topic whose partition count the job's topics share (``--partitions``' default)."""

    def plan(self, spark: SparkSession, options: StreamingOptions, partitions: int) -> BatchPlan: ...

    def suffixed(self, suffix: str) -> StreamingJob:
        """The same job writing each of its output topics with ``suffix`` appended (a replay's)."""


class ErrorKeepingBatch:
    """``foreachBatch``'s function, keeping the ``IkkaiError`` a batch raised for the driver to raise unwrapped.

    The function runs in the driver's Python process (called back from the JVM), so the error
    object is still here when ``awaitTermination`` raises Spark's ``StreamingQueryException``.
    """

    def __init__(self, function: BatchFunction) -> None:
        self.function = function
        self.error: IkkaiError | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self.function(batch, batch_id)
        except IkkaiError as exc:
            self.error = exc
            raise


@dataclass(frozen=True)
class RunningQuery:
    """A started query: awaited, it raises the ``IkkaiError`` that stopped a batch as itself.

    ``refusal`` gives that error, if the batch kept one (``ErrorKeepingBatch``, or the file a data source
    writer's commit left, ``stream_writer.read_refusal``); ``explain`` raises the explanation when the topics'
    metadata explains the failure (the data source path: nothing of the driver runs inside its batches).
    """

    query: StreamingQuery
    refusal: Callable[[], IkkaiError | None]
    explain: Callable[[BaseException], None] = lambda _failure: None

    def await_termination(self) -> None:
        from pyspark.errors import StreamingQueryException

        try:
            self.query.awaitTermination()
        except StreamingQueryException as failure:
            self.explain(failure)  # the topics' metadata first: it names the procedure, a task's refusal does not
            refusal = self.refusal()
            if refusal is not None:
                raise refusal from None
            raise


def topic_partitions(cluster: KafkaContext, topic: str) -> int | None:
    metadata = AdminClient(cluster.client_config()).list_topics(timeout=30).topics.get(topic)
    return None if metadata is None or metadata.error is not None else len(metadata.partitions)


def pinned_partitions(job: str, cluster: KafkaContext, given: int | None, layout_topic: str, input_topic: str) -> int:
    """The partition count every topic of the job shares; the input must already have it."""
    partitions = given or topic_partitions(cluster, layout_topic)
    if partitions is None:
        raise ConfigError(job, "--partitions", f"the topic {layout_topic} does not exist",
                          fix="create the topics (--create-topics) or pass --partitions")  # fmt: skip
    input_partitions = topic_partitions(cluster, input_topic)
    if input_partitions is None:
        raise ConfigError(job, input_topic, "the input topic does not exist",
                          fix="create it (--create-topics) or name the right one (--input)")  # fmt: skip
    if input_partitions != partitions:
        raise ConfigError(
            job, input_topic, f"has {input_partitions} partitions, {layout_topic} {partitions}",
            fix="input and output topics share one partition layout: grow every topic of the job to the same count "
            "(docs/exactly-once.md, 'What an operator may change, and how': partitions), then start it again",
        )  # fmt: skip
    return partitions


# The source's consumer pipelines a fetch after each poll; at the end of the partition the broker holds it until
# a new record comes or fetch.max.wait.ms (500 ms by default) passes, and answers one connection's requests in
# order, so the two offset lookups Spark makes after every poll waited behind it: up to the gap between two
# records, long at a low rate (a small batch took ~50 ms less at 10 records/s per partition). The same bound as
# every reader that reads to the end (kafka.QUICK_TO_END), in the Java client's name.
SOURCE_FETCH_MAX_WAIT_MS = kafka.QUICK_TO_END["fetch.wait.max.ms"]


def kafka_source(
    spark: SparkSession, cluster: KafkaContext | Mapping[str, str], topic: str, max_offsets_per_trigger: int | None
) -> DataFrame:
    """The job's input from the start, committed records only (rule 3), failing loudly if records were lost.

    ``cluster``: the cluster, or the Spark source's settings already computed for it (``StreamingOptions``).
    """
    settings = cluster.spark_options() if isinstance(cluster, KafkaContext) else cluster
    source = (
        spark.readStream.format("kafka")
        .options(**settings)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("kafka.fetch.max.wait.ms", str(SOURCE_FETCH_MAX_WAIT_MS))
    )
    if max_offsets_per_trigger:
        source = source.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return source.load()


def retry_deadline_s(transaction_timeout_ms: int) -> float:
    """How long one transaction step is retried: 30 s, or less when the timeout is short."""
    return min(30.0, transaction_timeout_ms / 2000)


def crash_hook(query: str, crash_after_batch: int | None) -> AfterBatch:
    """Fault injection for the tests: SIGKILL this process right after batch ``crash_after_batch`` is written."""

    def after_batch(batch_id: int, _: list[PartitionResult]) -> None:
        if crash_after_batch is not None and batch_id >= crash_after_batch:
            sys.stderr.write(f"{query}: fault injection: SIGKILL after batch {batch_id}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    return after_batch


def sink_config(options: StreamingOptions, plan: BatchPlan, partitions: int, job: str) -> SinkConfig:
    """The query's sink settings: the options and the job's plan, with the bounds the transaction timeout gives."""
    return SinkConfig(
        app=options.app, query=options.query, cluster=options.cluster,
        output_topics=plan.output_topics, partitions=partitions, order_by=plan.order_by,
        source_topic=options.input_topic, transaction_timeout_ms=options.transaction_timeout_ms,
        retry_deadline_s=retry_deadline_s(options.transaction_timeout_ms),
        # No input may stop the job: the input by id (looked up by prepare_sink; a recreated topic is refused), a
        # record too large for the producer set aside as a dead letter, transactions bounded in bytes too.
        input_recreated=options.input_recreated, dlq_topic=plan.dlq_topic, dlq_stage=job,
        dead_letter_codec=environment_codec(),
        max_transaction_bytes=default_max_transaction_bytes(options.transaction_timeout_ms),
        partition_column=plan.partition_column, outputs_follow_input=plan.outputs_follow_input,
        # A new version continues the query from its markers: the marker records the cut (query_handover).
        writer_version=plan.writer_version, after_query=options.after_query, start_offsets=options.start_offsets,
        transactional_writer=options.transactional_writer, shadow=options.shadow, transactions=options.transactions,
    )  # fmt: skip


def start_query(spark: SparkSession, options: StreamingOptions, job: StreamingJob) -> RunningQuery:
    """The start sequence (module docstring): the job's plan wired to the source, the sink and the trigger.

    The template's own steps first (the layout, the plan, the sink's settings, how it is attached); then each
    floor below once: the Spark source, the sink's start (``prepare_sink``), the attached query.
    """
    after_batch = crash_hook(options.query, options.crash_after_batch)
    partitions = pinned_partitions(job.name, options.cluster, options.partitions, job.layout_topic, options.input_topic)
    plan = job.plan(spark, options, partitions)
    attach = sink_api(options, plan)
    source = options.source_options or options.cluster  # the settings computed where the cluster was resolved
    rows = plan.rows(kafka_source(spark, source, options.input_topic, options.max_offsets))
    stream = rows.writeStream.queryName(options.query).option("checkpointLocation", str(options.checkpoint))
    if plan.output_mode:
        stream = stream.outputMode(plan.output_mode)
    config = sink_config(options, plan, partitions, job.name)
    trigger = stream_trigger(options.available_now, options.trigger_interval)
    # The sink's side of the start, in one pass (sink.query_start): the input by id, a rebase, the writer prepared.
    as_they_are = attach == DATA_SOURCE or plan.batch_function is _identity  # the writer gets the rows' micro-batches
    writer = prepare_sink(spark, config, SinkStart(job.name, options.mode, options.checkpoint, after_batch,
                                                   plan.transform, rows if as_they_are else None))  # fmt: skip
    sys.stderr.write(f"{options.query}: the sink is attached as {attach} ({options.mode})\n")
    if not options.transactions:
        sys.stderr.write(f"{options.query}: Kafka transactions OFF (--benchmark-without-transactions): "
                         "NOT exactly-once, a benchmark's baseline only\n")  # fmt: skip
    if attach == DATA_SOURCE:
        from spark_jobs.sink.stream_writer import attach_data_source  # Spark's data source API: loaded for it alone

        assert isinstance(writer, TransactionalBatchWriter) and plan.transform is not None
        attached, refusal = attach_data_source(spark, stream, writer, plan.transform, options.crash_after_batch)
        return RunningQuery(attached.trigger(**trigger).start(), refusal, writer.explain)
    batch = ErrorKeepingBatch(plan.batch_function(writer))
    return RunningQuery(stream.foreachBatch(batch).trigger(**trigger).start(), lambda: batch.error)


def sink_api(options: StreamingOptions, plan: BatchPlan, writer: BatchWriter | None = None) -> str:
    """How the sink is attached: ``foreachBatch`` unless ``--sink-api data-source`` asks for the data source writer.

    The data source writer serves exactly-once jobs written in place with the sink's transform. It is
    not the default: on an idle machine it measured the same throughput as ``foreachBatch`` and a worse
    p99 at low load (BENCHMARKS.md: its 1.7-1.9x was measured on a loaded machine, where the driver's
    work per batch waits for a core). On a cluster, Spark runs its driver side (the plan, ``commit``)
    with the executors' Python, which must then run on the driver's machine with ikkai's libraries.
    Decided before the sink is prepared (``writer`` None: the mode says which writer it will be), so a refusal
    claims nothing.
    """
    exactly_once = options.mode == EXACTLY_ONCE if writer is None else isinstance(writer, TransactionalBatchWriter)
    serves = exactly_once and plan.transform is not None and plan.partition_column
    if options.sink_api == DATA_SOURCE and not serves:
        raise ConfigError(
            "the job's options", "--sink-api", "data-source serves exactly-once jobs whose rows are written in place "
            "with the sink's transform (infer)", fix="leave --sink-api out",
        )  # fmt: skip
    return options.sink_api or FOREACH_BATCH


def default_checkpoint_refusal(master: str, options: StreamingOptions) -> ConfigError | None:
    """The default checkpoint (a folder under the driver's ``$IKKAI_HOME``) refused on a master that is not local.

    On a cluster a restarted driver may run on another machine, and executors write the state of
    enrich's deduplication into the checkpoint too: it must be storage every process reaches (HDFS,
    S3, a shared folder), which only the operator can name. The master is the session's own, so a
    job that spark-submit started (whose ``--master`` is spark-submit's) is checked as well. Pure.
    """
    if options.checkpoint_given or master.startswith("local"):
        return None
    return ConfigError(
        "the job's options", "--checkpoint",
        f"not given, and the default {options.checkpoint} is a folder of the driver's machine; on {master} "
        "a restarted driver and the executors must all reach the checkpoint",
        fix="pass --checkpoint with a location every process of the cluster reaches (hdfs://, s3a://, a shared "
        "folder), the same on every restart of this query",
    )  # fmt: skip


def run_job(options: StreamingOptions, job: StreamingJob) -> None:
    """One session, one query, until it drains (or forever when continuous); the session is always stopped."""
    from spark_jobs.session import spark_session

    spark = spark_session(f"{options.app}-{options.query}", master=options.master)
    try:
        refusal = default_checkpoint_refusal(spark.sparkContext.master or options.master, options)
        if refusal is not None:
            raise refusal
        if options.progress:
            from spark_jobs.progress import ProgressLines

            spark.streams.addListener(ProgressLines())
        live = start_query(spark, options, job)
        if options.replay_requests is None:
            live.await_termination()
            return
        from spark_jobs.replay_query import ReplayRequests

        with ReplayRequests(options.replay_requests, options, functools.partial(run_replay, spark, options, job)):
            live.await_termination()
    finally:
        spark.stop()


def run_replay(spark: SparkSession, live: StreamingOptions, job: StreamingJob, request: ReplayRequest) -> None:
    """One replay request, beside the live query in its session: its own query, until it drains."""
    start_query(spark, replay_options(live, request), job.suffixed(request.suffix)).await_termination()


def main_entry(command: Callable[..., Any], argv: Sequence[str] | None = None) -> None:
    """``python -m spark_jobs.<job>``: an IkkaiError is one line on stderr and exit 1, never a traceback."""
    try:
        command(args=argv, standalone_mode=True)
    except IkkaiError as exc:
        sys.stderr.write(f"ikkai: error: {exc}\n")
        sys.exit(1)

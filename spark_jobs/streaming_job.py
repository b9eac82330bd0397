"""The streaming-job template: the start sequence and the exactly-once wiring, once.

A job (enrich, infer) parses its options (``spark_jobs.options``: pure, nothing touched yet), then
supplies its name, the topic that pins its partition layout, and a ``BatchPlan`` once the partition
count is known: what it writes, what decides its output (``writer_version``), how the Kafka source
becomes the streamed rows and what runs per micro-batch. The template does the rest, in this order::

    opened (the cluster resolved and checked, --create-topics) → the session → pinned_partitions →
    the job's plan → kafka_source → sink_config → the trigger → prepare_sink → attached, started

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

import dataclasses
import functools
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka.admin import AdminClient

from ikkai.contract import kafka
from ikkai.contract.kafka import KafkaContext, resolve_cluster
from ikkai.contract.wire_format import environment_codec
from ikkai.errors import ConfigError, IkkaiError
from spark_jobs.options import (
    DATA_SOURCE,
    DEFAULT_TRIGGER_INTERVAL,
    FOREACH_BATCH,
    JobOptions,
    default_max_offsets_per_trigger,
    default_max_transaction_bytes,
    stream_trigger,
)
from spark_jobs.sink.config import DEFAULT_TRANSACTION_TIMEOUT_MS, DEFAULT_TRANSACTIONAL_WRITER
from spark_jobs.sink.query_start import EXACTLY_ONCE, AfterBatch, BatchWriter, SinkStart, prepare_sink
from spark_jobs.sink.transactional_sink import (
    PartitionResult,
    RowTransform,
    SinkConfig,
    TransactionalBatchWriter,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from spark_jobs.replay_query import ReplayRequest

BatchFunction = Callable[["DataFrame", int], None]


@dataclass(frozen=True)
class StreamingOptions:
    """What every streaming job is started with: where it reads and keeps its state, how fast, which writer."""

    cluster: KafkaContext
    checkpoint: Path | str  # a folder of the driver's machine, or a URI (hdfs://, s3a://) kept as written
    input_topic: str
    query: str
    partitions: int | None = None
    mode: str = "exactly-once"
    app: str = "ikkai"
    available_now: bool = True
    trigger_interval: str = DEFAULT_TRIGGER_INTERVAL  # with available_now False
    max_offsets_per_trigger: int | None = None  # None: default_max_offsets_per_trigger(transaction_timeout_ms)
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    master: str = "local[2]"
    crash_after_batch: int | None = None  # fault injection for tests: SIGKILL itself after this batch's write
    input_recreated: str = ""  # --input-recreated: the recreated input topic's id, to start over on it
    shadow: bool = False  # infer's --shadow: the query may claim only *.shadow topics
    after_query: str = ""  # a new query taking over another's output (query_handover)
    start_offsets: dict[int, int] = field(default_factory=dict)  # or told where to start
    progress: bool = False  # --progress: each batch's StreamingQueryProgress on stderr (spark_jobs.progress)
    checkpoint_given: bool = True  # False: the default under $IKKAI_HOME, which only a local master may use
    sink_api: str | None = None  # hidden --sink-api; None: foreachBatch (data-source: spark_jobs.sink.stream_writer)
    transactional_writer: str = DEFAULT_TRANSACTIONAL_WRITER  # --transactional-writer: who keeps the producers
    replay_requests: Path | None = None  # --replay-requests: a folder of replay requests (spark_jobs.replay_query)
    replay_of: str = ""  # a replay's: the live query whose recorded cut it reproduces (replay_options)
    transactions: bool = True  # False: the hidden --benchmark-without-transactions, NOT exactly-once (SinkConfig)
    # The Spark Kafka source's settings for ``cluster``, computed once where it is resolved (``opened``); empty: from
    # ``cluster`` when the source is built
    source_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, given: JobOptions, cluster: KafkaContext, query: str, shadow: bool = False,
        source_options: Mapping[str, str] | None = None,
    ) -> StreamingOptions:  # fmt: skip
        """The options the template runs with: what the command line gave, the cluster resolved (the default
        checkpoint a folder under ``$IKKAI_HOME``)."""
        from ikkai.settings import ikkai_home

        return cls(
            cluster=cluster, source_options=dict(source_options or {}),
            checkpoint=given.checkpoint or ikkai_home() / "checkpoints" / query,
            input_topic=given.input_topic, query=query, partitions=given.partitions, mode=given.mode,
            available_now=not given.continuous, trigger_interval=given.trigger_interval,
            max_offsets_per_trigger=given.max_offsets_per_trigger, transaction_timeout_ms=given.transaction_timeout_ms,
            master=given.master, crash_after_batch=given.crash_after_batch, input_recreated=given.input_recreated,
            after_query=given.after_query, start_offsets=given.start_offsets, progress=given.progress,
            checkpoint_given=given.checkpoint_given, sink_api=given.sink_api,
            transactional_writer=given.transactional_writer, replay_requests=given.replay_requests, shadow=shadow,
            transactions=not given.benchmark_without_transactions,
        )  # fmt: skip

    @property
    def max_offsets(self) -> int:
        """Input records per micro-batch at most: the given bound, else the one the transaction timeout allows."""
        return self.max_offsets_per_trigger or default_max_offsets_per_trigger(self.transaction_timeout_ms)


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


def kafka_cluster(job: str, given: str | None) -> KafkaContext:
    """The job's Kafka cluster, resolved once (``kafka.resolve_cluster``: --bootstrap, the environment,
    or the embedded stack's record) and checked before Spark starts, so wrong credentials or a wrong
    CA are one line within seconds. The context then travels with the job's configuration, into the
    Spark source, the sink and its Python workers; nothing reads the environment again.
    """
    cluster = resolve_cluster(given)
    if cluster is None:
        raise ConfigError(job, "--bootstrap", "no cluster configured", fix="run `ikkai stack up` or pass --bootstrap")
    kafka.check_access(cluster, timeout=30)
    return cluster


@dataclass(frozen=True)
class MoreTopics:
    """Topics a job creates under ``--create-topics`` besides its partitioned ones (enrich's master data)."""

    names: tuple[str, ...]
    partitions: int
    config: Mapping[str, str]


def opened(
    job: str, given: JobOptions, query: str, output_topics: tuple[str, ...], shadow: bool = False,
    more_topics: MoreTopics | None = None,
) -> StreamingOptions:  # fmt: skip
    """The run's first step, before Spark: the cluster resolved and checked, ``--create-topics`` done, and the Spark
    source's settings for the cluster computed: every use of the cluster's settings at the start, in one place."""
    cluster = kafka_cluster(job, given.bootstrap)
    if given.create_topics and given.partitions:  # JobOptions refuses --create-topics without --partitions
        kafka.ensure_topics(cluster, [given.input_topic, *output_topics], given.partitions)  # never auto-created
        if more_topics is not None:
            kafka.ensure_topics(cluster, more_topics.names, more_topics.partitions, config=dict(more_topics.config))
    return StreamingOptions.of(given, cluster, query, shadow, cluster.spark_options())


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


def replay_options(live: StreamingOptions, request: ReplayRequest) -> StreamingOptions:
    """The live query's options turned into a replay's (``spark_jobs.replay_query``): its name and checkpoint, from
    the earliest offsets to the end, in default-sized batches, with none of the live query's start or crash
    settings. Pure."""
    return dataclasses.replace(
        live, query=request.query, checkpoint=request.checkpoint, available_now=True, max_offsets_per_trigger=None,
        crash_after_batch=None, input_recreated="", after_query="", start_offsets={}, checkpoint_given=True,
        replay_of=live.query,
        shadow=False,  # a replay's topics are its own (a suffix), never a shadow's
    )  # fmt: skip


def main_entry(command: Callable[..., Any], argv: Sequence[str] | None = None) -> None:
    """``python -m spark_jobs.<job>``: an IkkaiError is one line on stderr and exit 1, never a traceback."""
    try:
        command(args=argv, standalone_mode=True)
    except IkkaiError as exc:
        sys.stderr.write(f"ikkai: error: {exc}\n")
        sys.exit(1)

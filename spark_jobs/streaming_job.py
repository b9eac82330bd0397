"""The streaming-job template: the shared options, the start sequence and the exactly-once wiring, once.

A job (enrich, infer) supplies its name, the topic that pins its partition layout, and a
``BatchPlan`` once the partition count is known: what it writes, what decides its output
(``writer_version``), how the Kafka source becomes the streamed rows and what runs per
micro-batch. The template does the rest, in this order::

    pinned_partitions → the job's plan → kafka_source → SinkConfig (input identity, handover,
    start offsets) → batch_writer(crash_hook) → rebase on a recreated input → prepare → trigger

The sink is attached one of two ways: through ``foreachBatch`` (the default), or, for a job whose rows
are written in place with the sink's transform (infer) and ``--sink-api data-source``, through a
Python data source's stream writer (``stream_writer``: per-task write, driver commit, no driver
callback per batch; ``sink_api`` says why it is not the default). An ``IkkaiError`` raised inside a
batch reaches the driver wrapped in Spark's ``StreamingQueryException`` (a page of JVM and Python
traceback); the template raises the ``IkkaiError`` itself instead, so the job prints its one line
and exits 1 (``job_shell.main_entry``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.wire_format import environment_codec
from ikkai.errors import ConfigError, IkkaiError
from spark_jobs.job_shell import (
    DEFAULT_TRIGGER_INTERVAL,
    MODES,
    batch_bound_options,
    batch_writer,
    continuous_options,
    crash_hook,
    default_max_offsets_per_trigger,
    default_max_transaction_bytes,
    ensure_topics,
    kafka_cluster,
    kafka_source,
    pinned_partitions,
    retry_deadline_s,
    stream_trigger,
)
from spark_jobs.sink.input_identity import (
    input_recreated_option,
    input_topic_id,
    is_uri,
    rebase_on_recreated_input,
)
from spark_jobs.sink.partition_transactions import DEFAULT_TRANSACTION_TIMEOUT_MS, DEFAULT_TRANSACTIONAL_WRITER
from spark_jobs.sink.query_handover import handover_options
from spark_jobs.sink.transactional_sink import (
    AtLeastOnceBatchWriter,
    RowTransform,
    SinkConfig,
    TransactionalBatchWriter,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from spark_jobs.replay_query import ReplayRequest

BatchWriter = TransactionalBatchWriter | AtLeastOnceBatchWriter
FOREACH_BATCH, DATA_SOURCE = "foreach-batch", "data-source"  # how the sink is attached to the query
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

    @classmethod
    def from_cli(cls, job: str, kw: dict[str, Any], query: str, output_topics: tuple[str, ...]) -> StreamingOptions:
        """The shared options as the command line gave them; the servers checked, ``--create-topics`` done."""
        import click

        from ikkai.settings import ikkai_home

        if kw.get("replay_requests") and not kw["continuous"]:  # refused before Kafka or Spark is touched
            raise click.UsageError("--replay-requests needs --continuous: a replay runs beside a live query")
        cluster = kafka_cluster(job, kw["bootstrap"])
        if kw["create_topics"]:
            if not kw["partitions"]:
                raise click.UsageError("--create-topics needs --partitions")
            ensure_topics(cluster, [kw["input_topic"], *output_topics], kw["partitions"])
        return cls(
            cluster=cluster, checkpoint=kw["checkpoint"] or ikkai_home() / "checkpoints" / query,
            input_topic=kw["input_topic"], query=query, partitions=kw["partitions"], mode=kw["mode"],
            available_now=not kw["continuous"], trigger_interval=kw["trigger_interval"],
            max_offsets_per_trigger=kw["max_offsets_per_trigger"], transaction_timeout_ms=kw["transaction_timeout_ms"],
            master=kw["master"], crash_after_batch=kw["crash_after_batch"], input_recreated=kw["input_recreated"],
            after_query=kw["after_query"], start_offsets=kw["start_offsets"], progress=kw["progress"],
            checkpoint_given=kw["checkpoint"] is not None, sink_api=kw.get("sink_api"),
            transactional_writer=kw.get("transactional_writer", DEFAULT_TRANSACTIONAL_WRITER),
            replay_requests=kw.get("replay_requests"), shadow=bool(kw.get("shadow")),
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


def start_query(spark: SparkSession, options: StreamingOptions, job: StreamingJob) -> RunningQuery:
    """The start sequence (module docstring): the job's plan wired to the source, the sink and the trigger."""
    partitions = pinned_partitions(job.name, options.cluster, options.partitions, job.layout_topic, options.input_topic)
    plan = job.plan(spark, options, partitions)
    rows = plan.rows(kafka_source(spark, options.cluster, options.input_topic, options.max_offsets))
    config = SinkConfig(
        app=options.app, query=options.query, cluster=options.cluster,
        output_topics=plan.output_topics, partitions=partitions, order_by=plan.order_by,
        source_topic=options.input_topic, transaction_timeout_ms=options.transaction_timeout_ms,
        retry_deadline_s=retry_deadline_s(options.transaction_timeout_ms),
        # No input may stop the job: the input by id (a recreated topic is refused), a record too large for
        # the producer set aside as a dead letter, transactions bounded in bytes too.
        source_topic_id=input_topic_id(job.name, options.cluster, options.input_topic),
        input_recreated=options.input_recreated, dlq_topic=plan.dlq_topic, dlq_stage=job.name,
        dead_letter_codec=environment_codec(),
        max_transaction_bytes=default_max_transaction_bytes(options.transaction_timeout_ms),
        partition_column=plan.partition_column, outputs_follow_input=plan.outputs_follow_input,
        # A new version continues the query from its markers: the marker records the cut (query_handover).
        writer_version=plan.writer_version, after_query=options.after_query, start_offsets=options.start_offsets,
        transactional_writer=options.transactional_writer, shadow=options.shadow,
    )  # fmt: skip
    after_batch = crash_hook(options.query, options.crash_after_batch)
    writer = batch_writer(options.mode, config, after_batch, plan.transform)
    if options.mode == "exactly-once":
        rebase_on_recreated_input(config, options.checkpoint, spark)  # --input-recreated: start over on the new topic
    if isinstance(writer, TransactionalBatchWriter):
        writer.prepare(spark)
    stream = rows.writeStream.queryName(options.query).option("checkpointLocation", str(options.checkpoint))
    if plan.output_mode:
        stream = stream.outputMode(plan.output_mode)
    trigger = stream_trigger(options.available_now, options.trigger_interval)
    attach = sink_api(options, plan, writer)
    sys.stderr.write(f"{options.query}: the sink is attached as {attach} ({options.mode})\n")
    if attach == DATA_SOURCE:
        assert isinstance(writer, TransactionalBatchWriter)
        attached, refusal = data_source_stream(spark, stream, rows, options, plan, writer)
        return RunningQuery(attached.trigger(**trigger).start(), refusal, writer.explain)
    batch = ErrorKeepingBatch(plan.batch_function(writer))
    return RunningQuery(stream.foreachBatch(batch).trigger(**trigger).start(), lambda: batch.error)


def sink_api(options: StreamingOptions, plan: BatchPlan, writer: BatchWriter) -> str:
    """How the sink is attached: ``foreachBatch`` unless ``--sink-api data-source`` asks for the data source writer.

    The data source writer serves exactly-once jobs written in place with the sink's transform. It is
    not the default: on an idle machine it measured the same throughput as ``foreachBatch`` and a worse
    p99 at low load (BENCHMARKS.md: its 1.7-1.9x was measured on a loaded machine, where the driver's
    work per batch waits for a core). On a cluster, Spark runs its driver side (the plan, ``commit``)
    with the executors' Python, which must then run on the driver's machine with ikkai's libraries.
    """
    serves = isinstance(writer, TransactionalBatchWriter) and plan.transform is not None and plan.partition_column
    if options.sink_api == DATA_SOURCE and not serves:
        raise ConfigError(
            "the job's options", "--sink-api", "data-source serves exactly-once jobs whose rows are written in place "
            "with the sink's transform (infer)", fix="leave --sink-api out",
        )  # fmt: skip
    return options.sink_api or FOREACH_BATCH


def data_source_stream(
    spark: SparkSession,
    stream: DataStreamWriter,
    rows: DataFrame,
    options: StreamingOptions,
    plan: BatchPlan,
    writer: TransactionalBatchWriter,
) -> tuple[DataStreamWriter, Callable[[], IkkaiError | None]]:
    """The prepared writer's sink as a Python data source's stream writer, and where a batch's refusal is read.

    The plan is checked before the query starts (one task per Kafka partition); a refusal travels from a
    task through the driver-side commit to a file in a folder of this process's own (0700).
    """
    import atexit
    import os
    import shutil
    import tempfile

    from spark_jobs.sink.stream_writer import (
        StreamSink,
        TransactionalDataSource,
        read_refusal,
        refuse_a_split_stream,
    )

    assert plan.transform is not None
    refuse_a_split_stream(rows, writer.config)
    folder = tempfile.mkdtemp(prefix=f"ikkai-{options.query}-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # after the driver read it, when the job ends
    refusal_file = Path(folder) / "refusal"
    crash_pids: tuple[int, ...] = ()
    if options.crash_after_batch is not None:  # the driver's JVM first (it would go on to Spark's commit log)
        crash_pids = (int(spark._jvm.java.lang.ProcessHandle.current().pid()), os.getpid())  # type: ignore[union-attr]
    sink = StreamSink(writer.config, plan.transform.function, str(refusal_file), options.crash_after_batch, crash_pids)
    spark.dataSource.register(TransactionalDataSource)
    return stream.format(TransactionalDataSource.name()).options(**sink.option()), lambda: read_refusal(refusal_file)


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

        def run_replay(request: ReplayRequest) -> None:
            start_query(spark, replay_options(options, request), job.suffixed(request.suffix)).await_termination()

        with ReplayRequests(options.replay_requests, options, run_replay):
            live.await_termination()
    finally:
        spark.stop()


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


def checkpoint_location(value: str | None) -> Path | str | None:
    """``--checkpoint`` as given: a URI stays a string (``Path`` would turn ``hdfs://nn/x`` into ``hdfs:/nn/x``)."""
    if value is None or is_uri(value):
        return value
    return Path(value)


def input_options(input_topic: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--bootstrap``, ``--checkpoint`` and ``--input`` (click), the input defaulting to ``input_topic``."""
    import click

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--input", "input_topic", default=input_topic, show_default=True)(command)
        command = click.option(
            "--checkpoint",
            callback=lambda _ctx, _param, value: checkpoint_location(value),
            help="Spark checkpoint folder [default with a local master: $IKKAI_HOME/checkpoints/<query>; required "
            "on a cluster, where every process must reach it: hdfs://, s3a://, a shared folder].",
        )(command)
        return click.option(
            "--bootstrap", help="Kafka bootstrap servers [default: IKKAI_BOOTSTRAP_SERVERS, else the local stack]."
        )(command)

    return decorate


def layout_options(layout_topic: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--partitions``, ``--create-topics`` and ``--mode`` (click); the partitions default to ``layout_topic``'s."""
    import click

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--mode", type=click.Choice(MODES), default="exactly-once", show_default=True)(command)
        command = click.option(
            "--create-topics", is_flag=True, help="Create missing topics with --partitions partitions first."
        )(command)
        return click.option(
            "--partitions", type=int, help=f"Pinned partition count of every topic [default: the {layout_topic}'s]."
        )(command)

    return decorate


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Where a query starts (handover, start offsets, a recreated input), when it stops, how big a batch is, and
    where it takes replay requests (click)."""
    from spark_jobs.replay_query import replay_requests_option

    return handover_options(input_recreated_option(continuous_options(batch_bound_options(
        replay_requests_option(command)))))  # fmt: skip


def master_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--master`` (click)."""
    import click

    return click.option("--master", default="local[2]", show_default=True)(command)


def crash_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The hidden options (click): the tests' ``--crash-after-batch`` (SIGKILL after that batch is written) and
    the benchmarks' ``--sink-api`` (``data-source``: the data source writer of ``spark_jobs.sink.stream_writer``)."""
    import click

    command = click.option("--sink-api", type=click.Choice((FOREACH_BATCH, DATA_SOURCE)), hidden=True)(command)
    return click.option("--crash-after-batch", type=int, hidden=True)(command)

"""The parts every streaming job is built of: topics, the bootstrap servers, the writer, batch bounds, triggers.

The enrich and infer jobs differ in what a micro-batch computes; how they find Kafka, create
and pin their topics, pick the exactly-once or at-least-once writer and inject a crash for the
tests is the same, and lives here once; ``streaming_job`` assembles these parts into a job's start.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka.admin import AdminClient

from ikkai.contract import kafka
from ikkai.contract.kafka import KafkaContext, resolve_cluster
from ikkai.errors import ConfigError, IkkaiError
from spark_jobs.sink.partition_transactions import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    DEFAULT_TRANSACTIONAL_WRITER,
    TRANSACTIONAL_WRITERS,
)
from spark_jobs.sink.transactional_sink import (
    AtLeastOnceBatchWriter,
    PartitionResult,
    RowTransform,
    SinkConfig,
    TransactionalBatchWriter,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MODES = ("exactly-once", "at-least-once")
AfterBatch = Callable[[int, list[PartitionResult]], None]

# How big a micro-batch may be when the user sets no bound, derived from the transaction timeout.
# One output partition's transaction must end well inside transaction.timeout.ms, or the broker
# aborts it and the same-sized retry is aborted again, forever (a backlog after an outage would
# never drain). The worst case: Spark's maxOffsetsPerTrigger is split by lag, so the whole batch
# may come from one input partition and land in one transaction, with up to OUTPUTS_PER_INPUT
# records per input record (a decision and its outbox requests). Budget: a quarter of the timeout,
# at WRITE_FLOOR_PER_S records/s, 20-40x below what the sink's producer sustains here (BENCHMARKS.md:
# 142-226k records/s from Python), for a loaded machine or a slow cluster.
WRITE_FLOOR_PER_S = 5_000
OUTPUTS_PER_INPUT = 3


def default_max_offsets_per_trigger(transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS) -> int:
    """The default bound of a micro-batch in input records: 25,000 for the default 60 s timeout."""
    budget_s = transaction_timeout_ms / 1000 / 4
    return max(100, int(budget_s * WRITE_FLOOR_PER_S / OUTPUTS_PER_INPUT))


# The same bound in bytes: dead letters carry up to 512 KiB each, so 25,000 records may be gigabytes.
# A transaction over it is written as several (partition_transactions.transaction_chunks). The floor
# is far below what one producer writes to a broker on the development machine, for a loaded machine
# or a slow cluster: 60 MiB must be written in 15 s for the default 60 s timeout.
WRITE_FLOOR_BYTES_PER_S = 4 * 1024 * 1024


def default_max_transaction_bytes(transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS) -> int:
    """The default bound of one transaction in bytes: a quarter of the timeout at the floor rate (60 MiB for 60 s)."""
    budget_s = transaction_timeout_ms / 1000 / 4
    return max(4 * 1024 * 1024, int(budget_s * WRITE_FLOOR_BYTES_PER_S))


def batch_bound_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The jobs' ``--max-offsets-per-trigger``, ``--transaction-timeout-ms`` and ``--transactional-writer`` (click)."""
    import click

    command = click.option(
        "--transactional-writer", type=click.Choice(TRANSACTIONAL_WRITERS), default=DEFAULT_TRANSACTIONAL_WRITER,
        show_default=True,
        help="Who keeps the sink's producers between batches: each Python worker, or one writer process per "
        "executor (docs/exactly-once.md, 'The executor writer').",
    )(command)  # fmt: skip
    command = click.option(
        "--transaction-timeout-ms", type=click.IntRange(min=1000), default=DEFAULT_TRANSACTION_TIMEOUT_MS,
        show_default=True, help="The sink's transaction.timeout.ms (at most the brokers' transaction.max.timeout.ms).",
    )(command)  # fmt: skip
    return click.option(
        "--max-offsets-per-trigger", type=click.IntRange(min=1),
        help="Input records per micro-batch at most [default: derived from --transaction-timeout-ms, "
        f"{default_max_offsets_per_trigger():,} for the default].",
    )(command)  # fmt: skip


# A continuous job's processing-time trigger. A payment waits for the batch that is running to end and then for
# its own batch, so a short interval keeps that wait near one batch's cost (BENCHMARKS.md: p99 at 200/s); the
# price is more, smaller batches at moderate rates (each pays the per-batch cost: transactions, markers,
# planning). Under a backlog the interval does not matter: a batch longer than it starts the next at once.
DEFAULT_TRIGGER_INTERVAL = "250 milliseconds"
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|min|minutes?)\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1.0, "millisecond": 1.0, "milliseconds": 1.0, "s": 1000.0, "second": 1000.0, "seconds": 1000.0,
            "min": 60_000.0, "minute": 60_000.0, "minutes": 60_000.0}  # fmt: skip


def trigger_interval_ms(text: str) -> float:
    """``--trigger-interval`` in milliseconds: ``250 milliseconds``, ``250ms``, ``1 s``, ``2 minutes``; ``0ms`` runs
    the batches back to back (Spark's own default trigger: the next starts as soon as the last one ended)."""
    match = _INTERVAL.match(text)
    if match is None:
        raise ConfigError(
            "the job's options", "--trigger-interval", f"{text!r} is not an interval",
            fix="write a number and a unit: 250ms, 1s, 2 minutes (ms, s, min); 0ms for back to back",
        )  # fmt: skip
    return float(match.group(1)) * _UNIT_MS[match.group(2).lower()]


def stream_trigger(available_now: bool, interval: str = DEFAULT_TRIGGER_INTERVAL) -> dict[str, Any]:
    """``DataStreamWriter.trigger``'s keyword: drain what is there and stop, or run every ``interval``."""
    if available_now:
        return {"availableNow": True}
    return {"processingTime": f"{trigger_interval_ms(interval):g} milliseconds"}


def continuous_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The jobs' ``--continuous``, ``--trigger-interval`` and ``--progress`` options (click)."""
    import click

    def checked(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
        try:
            trigger_interval_ms(value)  # refused before Spark starts, not after
        except ConfigError as exc:
            raise click.BadParameter(f"{exc.problem} ({exc.fix})") from exc
        return value

    command = click.option(
        "--trigger-interval", default=DEFAULT_TRIGGER_INTERVAL, show_default=True, callback=checked,
        help="With --continuous: how often a micro-batch starts when the last one ended early (250ms, 1s, 2min; "
        "0ms: back to back).",
    )(command)  # fmt: skip
    command = click.option(
        "--progress", is_flag=True,
        help="Write each micro-batch's Spark progress (input rows, durations by phase in ms) to stderr as one "
        "line: progress {json}.",
    )(command)  # fmt: skip
    return click.option(
        "--continuous", is_flag=True, help="Keep running (see --trigger-interval) instead of stopping when caught up."
    )(command)


def retry_deadline_s(transaction_timeout_ms: int) -> float:
    """How long one transaction step is retried: 30 s, or less when the timeout is short."""
    return min(30.0, transaction_timeout_ms / 2000)


def topic_partitions(cluster: KafkaContext, topic: str) -> int | None:
    metadata = AdminClient(cluster.client_config()).list_topics(timeout=30).topics.get(topic)
    return None if metadata is None or metadata.error is not None else len(metadata.partitions)


def ensure_topics(cluster: KafkaContext, names: Iterable[str], partitions: int) -> None:
    """Create the missing ones with ``partitions`` partitions (topics are never auto-created)."""
    kafka.ensure_topics(cluster, names, partitions)


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


def crash_hook(query: str, crash_after_batch: int | None) -> AfterBatch:
    """Fault injection for the tests: SIGKILL this process right after batch ``crash_after_batch`` is written."""

    def after_batch(batch_id: int, _: list[PartitionResult]) -> None:
        if crash_after_batch is not None and batch_id >= crash_after_batch:
            sys.stderr.write(f"{query}: fault injection: SIGKILL after batch {batch_id}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    return after_batch


def batch_writer(
    mode: str, config: SinkConfig, after_batch: AfterBatch, transform: RowTransform | None = None
) -> TransactionalBatchWriter | AtLeastOnceBatchWriter:
    """The exactly-once writer; or Spark's own at-least-once sink, the benchmarks' baseline."""
    if mode == "exactly-once":
        return TransactionalBatchWriter(config, after_batch=after_batch, transform=transform)
    return AtLeastOnceBatchWriter(config.cluster, after_batch=after_batch, query=config.query,
                                  transform=transform)  # fmt: skip


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
    spark: SparkSession, cluster: KafkaContext, topic: str, max_offsets_per_trigger: int | None
) -> DataFrame:
    """The job's input from the start, committed records only (rule 3), failing loudly if records were lost."""
    source = (
        spark.readStream.format("kafka")
        .options(**cluster.spark_options())
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if max_offsets_per_trigger:
        source = source.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return source.load()


def main_entry(command: Callable[..., Any], argv: Sequence[str] | None = None) -> None:
    """``python -m spark_jobs.<job>``: an IkkaiError is one line on stderr and exit 1, never a traceback."""
    try:
        command(args=argv, standalone_mode=True)
    except IkkaiError as exc:
        sys.stderr.write(f"ikkai: error: {exc}\n")
        sys.exit(1)

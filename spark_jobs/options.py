"""The jobs' options: each command-line option declared beside the dataclass field it fills, parsed typed.

A field made with ``option("--flag", help=...)`` is a dataclass field whose click declaration is its
metadata; ``click_options(cls)`` turns the fields into the command's options, named after the fields,
so click's parsed values construct the dataclass as they are (``cls(**values)``): a renamed field is a
renamed option, never a key read back by hand. ``JobOptions`` holds the options every streaming job
shares; a job subclasses it beside its own dataclass (``EnrichOptions``, ``InferOptions``), re-declaring
a shared field where its default or help differs (a re-declared field keeps its place) and adding its
own, each placed in ``--help`` after the shared option it belongs with. Parsing is pure: nothing here
touches Kafka or Spark; the cluster is resolved and topics are created when the job runs
(``streaming_options.opened``).

The defaults that the options derive from the transaction timeout (how big a micro-batch and a
transaction may be) and the trigger interval's form live here too: they are what the options mean.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ikkai.errors import ConfigError
from spark_jobs.sink.config import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    DEFAULT_TRANSACTIONAL_WRITER,
    TRANSACTIONAL_WRITERS,
)
from spark_jobs.sink.input_identity import is_uri
from spark_jobs.sink.query_handover import parse_start_offsets

CLICK = "click"  # the metadata key holding a field's option: (declarations, click's keywords)
AFTER = "after"  # the metadata key naming the field an option follows in --help ('': its own place)
MODES = ("exactly-once", "at-least-once")
FOREACH_BATCH, DATA_SOURCE = "foreach-batch", "data-source"  # how the sink is attached to the query
Command = Callable[..., Any]


def option(*declarations: str, default: Any = None, default_factory: Callable[[], Any] | None = None,
           after: str = "", **click_keywords: Any) -> Any:  # fmt: skip
    """A dataclass field that is a command-line option: ``declarations`` and ``click_keywords`` as ``click.option``
    takes them, the field's default the option's (``default_factory``: the field's alone, click passes None);
    ``after``: the field whose option it follows in ``--help`` (a job's own beside the shared one they belong to)."""
    if default is not None:
        click_keywords["default"] = default
    metadata = {CLICK: (declarations, click_keywords), AFTER: after}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def help_order(options: type[Any]) -> list[dataclasses.Field[Any]]:
    """The fields of ``options`` in field order, each one with an ``after`` moved behind the field it names. Pure."""
    fields = dataclasses.fields(options)
    placed = [item for item in fields if not item.metadata[AFTER]]
    for anchor in [item.name for item in placed]:
        followers = [item for item in fields if item.metadata[AFTER] == anchor]
        at = next(i for i, item in enumerate(placed) if item.name == anchor) + 1
        placed[at:at] = followers
    return placed


def click_options(options: type[Any]) -> Callable[[Command], Command]:
    """The fields of the dataclass ``options`` as click options of a command (in ``help_order``), each named after
    its field (so ``options(**values)`` takes what click parsed)."""

    def decorate(command: Command) -> Command:
        for item in reversed(help_order(options)):
            declarations, keywords = item.metadata[CLICK]
            command = click.option(*declarations, item.name, **keywords)(command)
        return command

    return decorate


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
    return measured_max_offsets_per_trigger(WRITE_FLOOR_PER_S, OUTPUTS_PER_INPUT, transaction_timeout_ms)


def measured_max_offsets_per_trigger(
    records_per_s: float, outputs_per_input: float, transaction_timeout_ms: int, bytes_per_output: float = 0.0
) -> int:
    """The bound of a micro-batch in input records that a write rate gives. Pure.

    ``records_per_s`` is what one partition's writer sustains (measured, or the floor), ``outputs_per_input`` the
    output records per input record (measured, or the worst case). A whole batch may land in one partition (Spark
    splits ``maxOffsetsPerTrigger`` by lag), so its records must be written in a quarter of the timeout at that
    rate; with ``bytes_per_output`` (measured), they must also fit one transaction's bytes
    (``default_max_transaction_bytes``), so a batch is not cut into several transactions by size. At least 100.
    """
    if records_per_s <= 0 or outputs_per_input <= 0 or bytes_per_output < 0:
        raise ValueError(f"a write rate of {records_per_s}/s, {outputs_per_input} outputs per input, "
                         f"{bytes_per_output} bytes per output does not bound a batch")  # fmt: skip
    budget_s = transaction_timeout_ms / 1000 / 4
    bound = budget_s * records_per_s / outputs_per_input
    if bytes_per_output:
        in_bytes = default_max_transaction_bytes(transaction_timeout_ms) / (outputs_per_input * bytes_per_output)
        bound = min(bound, in_bytes)
    return max(100, int(bound))


# The same bound in bytes: dead letters carry up to 512 KiB each, so 25,000 records may be gigabytes.
# A transaction over it is written as several (partition_transactions.transaction_chunks). The floor
# is far below what one producer writes to a broker on the development machine, for a loaded machine
# or a slow cluster: 60 MiB must be written in 15 s for the default 60 s timeout.
WRITE_FLOOR_BYTES_PER_S = 4 * 1024 * 1024


def default_max_transaction_bytes(transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS) -> int:
    """The default bound of one transaction in bytes: a quarter of the timeout at the floor rate (60 MiB for 60 s)."""
    budget_s = transaction_timeout_ms / 1000 / 4
    return max(4 * 1024 * 1024, int(budget_s * WRITE_FLOOR_BYTES_PER_S))


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


def checkpoint_location(value: str | None) -> Path | str | None:
    """``--checkpoint`` as given: a URI stays a string (``Path`` would turn ``hdfs://nn/x`` into ``hdfs:/nn/x``)."""
    if value is None or is_uri(value):
        return value
    return Path(value)


def _checked(parse: Callable[[str], Any], given: Callable[[Any], str]) -> Callable[..., Any]:
    """A click callback: ``parse`` the value, a ``ConfigError`` refused as click's bad parameter (exit 2)."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        try:
            return parse(given(value))
        except ConfigError as exc:
            raise click.BadParameter(f"{exc.problem} ({exc.fix})") from exc

    return callback


def _interval(text: str) -> str:
    trigger_interval_ms(text)  # refused before Spark starts, not after
    return text


@dataclass(frozen=True)
class JobOptions:
    """The options every streaming job shares, as the command line gives them (``--help`` lists them in this order)."""

    bootstrap: str | None = option(
        "--bootstrap", help="Kafka bootstrap servers [default: IKKAI_BOOTSTRAP_SERVERS, else the local stack]."
    )
    checkpoint: Path | str | None = option(
        "--checkpoint", callback=lambda _ctx, _param, value: checkpoint_location(value),
        help="Spark checkpoint folder [default with a local master: $IKKAI_HOME/checkpoints/<query>; required "
        "on a cluster, where every process must reach it: hdfs://, s3a://, a shared folder].",
    )  # fmt: skip
    input_topic: str = option("--input", default="", show_default=True)  # each job names its input
    partitions: int | None = option("--partitions", type=int, help="Pinned partition count of every topic.")
    create_topics: bool = option(
        "--create-topics", is_flag=True, default=False, help="Create missing topics with --partitions partitions first."
    )
    mode: str = option("--mode", type=click.Choice(MODES), default="exactly-once", show_default=True)
    query: str | None = option("--query", help="Query name; part of every transactional.id.")
    after_query: str = option(
        "--after-query", default="", metavar="QUERY",
        help="A new query continues QUERY's output: QUERY is fenced and stops for good, this one starts at its "
        "committed offsets (recorded at the first start, so restarts need not repeat it).",
    )  # fmt: skip
    start_offsets: dict[int, int] = option(
        "--start-offsets", callback=_checked(parse_start_offsets, lambda value: value or ""), metavar="P:O,...",
        default_factory=dict,
        help="Write only input records from these offsets on (a query over output topics no query owns, e.g. "
        "written before); recorded at the query's first start, so its restarts need not repeat it.",
    )  # fmt: skip
    input_recreated: str = option(
        "--input-recreated", metavar="TOPIC_ID", default="",
        help="The input topic was deleted and recreated: decide every record of the topic with this id from its "
        "start, once (needs a fresh --checkpoint; the refusal names the id).",
    )  # fmt: skip
    continuous: bool = option(
        "--continuous", is_flag=True, default=False,
        help="Keep running (see --trigger-interval) instead of stopping when caught up.",
    )  # fmt: skip
    progress: bool = option(
        "--progress", is_flag=True, default=False,
        help="Write each micro-batch's Spark progress (input rows, durations by phase in ms) to stderr as one "
        "line: progress {json}.",
    )  # fmt: skip
    trigger_interval: str = option(
        "--trigger-interval", default=DEFAULT_TRIGGER_INTERVAL, show_default=True,
        callback=_checked(_interval, str),
        help="With --continuous: how often a micro-batch starts when the last one ended early (250ms, 1s, 2min; "
        "0ms: back to back).",
    )  # fmt: skip
    max_offsets_per_trigger: int | None = option(
        "--max-offsets-per-trigger", type=click.IntRange(min=1),
        help="Input records per micro-batch at most [default: derived from --transaction-timeout-ms, "
        f"{default_max_offsets_per_trigger():,} for the default].",
    )  # fmt: skip
    transaction_timeout_ms: int = option(
        "--transaction-timeout-ms", type=click.IntRange(min=1000), default=DEFAULT_TRANSACTION_TIMEOUT_MS,
        show_default=True, help="The sink's transaction.timeout.ms (at most the brokers' transaction.max.timeout.ms).",
    )  # fmt: skip
    transactional_writer: str = option(
        "--transactional-writer", type=click.Choice(TRANSACTIONAL_WRITERS), default=DEFAULT_TRANSACTIONAL_WRITER,
        show_default=True,
        help="Who keeps the sink's producers between batches: each Python worker, or one writer process per "
        "executor (docs/exactly-once.md, 'The executor writer').",
    )  # fmt: skip
    replay_requests: Path | None = option(
        "--replay-requests", type=click.Path(path_type=Path, file_okay=False),
        help="With --continuous: a folder where <query>.request files ask for a replay of the input from its start "
        "into the output topics with a suffix, as a second query of this job (<query>.done says how it ended).",
    )  # fmt: skip
    master: str = option("--master", default="local[2]", show_default=True)
    # Hidden: the tests' fault injection (SIGKILL after that batch is written) and the benchmarks' data source
    # writer (spark_jobs.sink.stream_writer).
    crash_after_batch: int | None = option("--crash-after-batch", type=int, hidden=True)
    sink_api: str | None = option("--sink-api", type=click.Choice((FOREACH_BATCH, DATA_SOURCE)), hidden=True)
    # Hidden, benchmarks only, NOT exactly-once: the exactly-once writer with its producers' transactions off
    # (SinkConfig.transactions), the like-for-like baseline of what the transactions cost. Named, never implied.
    benchmark_without_transactions: bool = option("--benchmark-without-transactions", is_flag=True, default=False,
                                                  hidden=True)  # fmt: skip

    def __post_init__(self) -> None:
        """What the options refuse together, before Kafka or Spark is touched (click's usage error, exit 2)."""
        if self.replay_requests and not self.continuous:
            raise click.UsageError("--replay-requests needs --continuous: a replay runs beside a live query")
        if self.create_topics and not self.partitions:
            raise click.UsageError("--create-topics needs --partitions")
        if self.benchmark_without_transactions and self.mode != "exactly-once":
            raise click.UsageError(
                "--benchmark-without-transactions turns off the transactions of the exactly-once writer: it needs "
                f"--mode exactly-once, not {self.mode}"
            )

    @property
    def checkpoint_given(self) -> bool:
        return self.checkpoint is not None

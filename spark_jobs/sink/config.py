"""The sink's settings (``SinkConfig``) and the bounds they default to: one frozen value per query.

The driver builds it at the start (``streaming_job``; ``query_start.prepare_sink`` adds the input's topic id,
``TransactionalBatchWriter.prepare`` what it reads from Kafka: the claim's start, the origin's layout, the topics'
limits) and Spark pickles it into
every write task; the executor writer gets it with each request. Nothing here touches Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import check_names, commits_topic_for, marker_key
from spark_jobs.sink.grown_layout import OPERATOR_GUIDE as OPERATOR_GUIDE  # where the sink's refusals point
from spark_jobs.sink.grown_layout import OriginLayout

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
# Bound of one transaction in bytes, for the default timeout (options.default_max_transaction_bytes).
DEFAULT_MAX_TRANSACTION_BYTES = 60 * 1024 * 1024


TRANSACTIONAL_WRITERS = ("worker", "executor")
DEFAULT_TRANSACTIONAL_WRITER = "executor"  # SinkConfig, the jobs' options and --transactional-writer


@dataclass(frozen=True)
class SinkConfig:
    """One query's sink: where it writes, how it orders and bounds its transactions, and what it takes over from."""

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
    # start (query_handover.take_over). Every write leaves out the records it holds (grown_layout).
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
    # False: benchmarks only (the hidden --benchmark-without-transactions), NOT exactly-once: the same writer, its
    # producers without a transactional.id (producer_pool.ProducerWithoutTransactions), to measure what they cost.
    transactions: bool = True

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

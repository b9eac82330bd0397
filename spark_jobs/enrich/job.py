"""The enrich job: ingest.payments (raw JSON lines) → events.payments (Avro) + dlq.enrich, in one transaction.

    python -m spark_jobs.enrich --checkpoint DIR [--bootstrap HOST:PORT] [--lateness 10000] ...

The stages of one micro-batch (docs/enrich.md is the user's guide):

1. The Kafka source reads ``ingest.payments`` with ``kafka.isolation.level=read_committed``.
2. Per input partition, in offset order (``applyInPandasWithState`` keyed by the partition):
   parse and validate each record (``enrich.parse``), then the event-time rules (``enrich.dedupe``:
   late beyond the watermark, duplicate event_id, stale status update). The gate's state lives in
   Spark's state store, so a restart resumes it at the checkpointed batch. Decisions do not depend
   on batch boundaries, so a crash-restart or a replay into fresh topics decides the same.
3. The transforms of the spec file (``--transforms``, default ``transforms.yaml``) run on
   the valid events, which have the columns ``enrich.records.TRANSFORM_COLUMNS`` (``ikkai transforms
   check`` checks a spec against the same list): amount to minor units, card masking, merchant category.
4. Each event is joined with its merchant's and customer's profile versions as of its event time
   and ingest time (``enrich.asof``; the versions are read once per batch on the driver and
   broadcast, and a master-data outage holds the batch, never rejects it).
5. Events (``payment_event``, latest schema, key payment_id) and dead letters (``dead_letter``, with
   the raw bytes, source topic/partition/offset, error_class and reason) are written by the
   ``TransactionalBatchWriter``: per output partition, events, dead letters and the commit marker
   are one Kafka transaction. Every input record yields exactly one of the two (in = out + DLQ).

The layout is pinned as in the infer job: ingest, events and DLQ topics have ``--partitions``
partitions; an event and a dead letter of input partition p go to partition p, sorted by input
offset, so a replay is byte-identical. ``--lateness``, the transforms and the currency exponents
decide outputs too: they make the writer version (``writer_version``), and restarting the same
query with other ones is a cutover the commit markers record (docs/exactly-once.md).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click

from ikkai.contract import topics
from ikkai.contract.codec import RecordCodec, default_codec
from ikkai.contract.markers import deciding_version
from ikkai.contract.wire_format import environment_codec
from ikkai.resources import package_file
from spark_jobs.enrich.asof import MasterData, MasterDataTopics, join_as_of
from spark_jobs.enrich.dedupe import DEFAULT_LATENESS_MS
from spark_jobs.enrich.master_data import TOPIC_CONFIG as MASTER_TOPIC_CONFIG
from spark_jobs.enrich.records import (
    CLASSIFIED_SCHEMA,
    EVENT,
    GATE_STATE_SCHEMA,
    ORDER_BY,
    SINK_SCHEMA,
    TRANSFORM_COLUMNS,
    EnrichParameters,
    classify_with_state,
    encode_dead_letters,
    encode_events,
)
from spark_jobs.options import JobOptions, click_options, option
from spark_jobs.sink.query_start import BatchWriter
from spark_jobs.streaming_job import BatchPlan, main_entry, run_job
from spark_jobs.streaming_options import MoreTopics, StreamingOptions, opened

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from transforms import TransformPipeline

TRANSFORMS_SPEC = package_file("spark_jobs.enrich", "transforms.yaml")  # also inside the submit zip
PARSE_A_NEW_FIELD = (
    "a raw field the enrich job does not parse yet is a change to the job itself "
    "(spark_jobs/enrich/parse.py and enrich.records.PARSED_COLUMNS), not to a transform"
)


def load_enrich_spec(path: str | Path = TRANSFORMS_SPEC) -> TransformPipeline:
    """The spec, validated, and every step checked to read only columns this job gives it (or an earlier step writes).

    The job and ``ikkai transforms check`` both call this, so a spec the check passes is one the job
    accepts: an unknown transform, a bad parameter or a column the job does not parse stops it here.
    """
    from transforms import load_spec
    from transforms.check import check_columns

    pipeline = load_spec(path)
    columns = [name for name, _ in TRANSFORM_COLUMNS]
    check_columns(pipeline, columns, given_by="the enrich job", fix=PARSE_A_NEW_FIELD)
    return pipeline


@dataclass(frozen=True)
class EnrichJob:
    """The enrich job's own options; the streaming-job template does the rest (``streaming_job``)."""

    name: ClassVar[str] = "enrich"
    events_topic: str = topics.EVENTS_PAYMENTS
    dlq_topic: str = topics.DLQ_ENRICH
    master_data: MasterDataTopics = field(default_factory=MasterDataTopics)
    lateness_ms: int = DEFAULT_LATENESS_MS
    transforms: Path = TRANSFORMS_SPEC
    master_data_timeout_s: float = 600.0

    @property
    def layout_topic(self) -> str:
        return self.events_topic

    @property
    def output_topics(self) -> tuple[str, str]:
        return (self.events_topic, self.dlq_topic)

    def suffixed(self, suffix: str) -> EnrichJob:
        return dataclasses.replace(self, events_topic=self.events_topic + suffix, dlq_topic=self.dlq_topic + suffix)

    def plan(self, spark: SparkSession, options: StreamingOptions, partitions: int) -> BatchPlan:
        from pyspark.sql import functions as F

        from transforms import CURRENCY_EXPONENTS

        pipeline = load_enrich_spec(self.transforms)  # a bad spec or a missing column stops the job here
        # The gate's state is grouped by input partition: one state task per input partition, no empty ones
        # (measured: 4 state tasks for 2 partitions made each batch ~25% slower). A new query records this in
        # its checkpoint; a running one keeps the count it started with (Spark restores it from the offset log).
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
        parameters = EnrichParameters(options.input_topic, self.events_topic, self.dlq_topic, partitions,
                                      self.lateness_ms, dict(CURRENCY_EXPONENTS))  # fmt: skip
        sys.stderr.write(
            f"{options.query}: {partitions} partitions, lateness {self.lateness_ms} ms, transforms "
            f"{', '.join(pipeline.names)}, mode {options.mode}\n"
        )

        def classified(source: DataFrame) -> DataFrame:
            return (
                source.select("key", "value", "partition", "offset", F.unix_millis("timestamp").alias("ingested_at"))
                .groupBy("partition")
                .applyInPandasWithState(
                    classify_with_state(parameters), CLASSIFIED_SCHEMA, GATE_STATE_SCHEMA, "update", "NoTimeout"
                )
            )

        def enrich_batch(writer: BatchWriter) -> EnrichBatch:
            codec = environment_codec()  # the wire format (IKKAI_SCHEMA_REGISTRY_URL), chosen once on the driver
            master_data = MasterData(options.cluster, self.master_data, self.master_data_timeout_s, codec)
            return EnrichBatch(parameters, master_data, pipeline, writer, codec)

        return BatchPlan(
            output_topics=self.output_topics, dlq_topic=self.dlq_topic, order_by=ORDER_BY,
            writer_version=writer_version(self.lateness_ms, parameters.exponents, self.transforms),
            rows=classified, batch_function=enrich_batch, output_mode="update",
            outputs_follow_input=True,  # events keyed like their input, dead letters to their partition (dlq_key)
        )  # fmt: skip


def writer_version(lateness_ms: int, exponents: Mapping[str, int], transforms: Path) -> str:
    """What decides enrich's output besides its input, as the markers' ``writer_version``.

    The lateness in clear, and a digest of the currency exponents and the transform spec's bytes:
    restarting the query with another of them is a cutover, recorded where it took over.
    """
    settings = json.dumps(dict(sorted(exponents.items()))).encode()
    return deciding_version(f"enrich-lateness{lateness_ms}", settings, transforms.read_bytes())


class EnrichBatch:
    """The ``foreachBatch`` function: transforms, master-data join, encoding, then the sink's write."""

    def __init__(
        self,
        parameters: EnrichParameters,
        master_data: MasterData,
        pipeline: TransformPipeline,
        writer: BatchWriter,
        codec: RecordCodec | None = None,
    ) -> None:
        self.parameters = parameters
        self.codec = codec or default_codec()
        self.master_data = master_data
        self.pipeline = pipeline
        self.writer = writer

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        parameters, codec = self.parameters, self.codec
        snapshot = batch.sparkSession.sparkContext.broadcast(self.master_data.snapshot(batch.sparkSession))
        batch = batch.persist()  # the state store is updated once; events and dead letters read the same rows
        try:
            events = self.pipeline.apply(
                batch.where(F.col("outcome") == EVENT).select(*(name for name, _ in TRANSFORM_COLUMNS))
            )
            rows = events.mapInPandas(
                lambda c: encode_events((join_as_of(chunk, snapshot.value) for chunk in c), codec, parameters),
                SINK_SCHEMA,
            ).unionByName(
                batch.where(F.col("outcome") != EVENT).mapInPandas(
                    lambda c: encode_dead_letters(c, codec, parameters), SINK_SCHEMA
                )
            )
            self.writer(rows, batch_id)
        finally:
            batch.unpersist()
            snapshot.unpersist()


@dataclass(frozen=True)
class EnrichOptions(JobOptions):
    """The enrich job's command line: the shared options (its input, layout topic and query its own), then its own."""

    input_topic: str = option("--input", default=topics.INGEST_PAYMENTS, show_default=True)
    partitions: int | None = option(
        "--partitions", type=int, help="Pinned partition count of every topic [default: the events topic's]."
    )
    query: str = option(
        "--query", default="enrich", show_default=True, help="Query name; part of every transactional.id."
    )
    events_topic: str = option("--output", after="input_topic", default=topics.EVENTS_PAYMENTS, show_default=True)
    dlq_topic: str = option("--dlq", after="input_topic", default=topics.DLQ_ENRICH, show_default=True)
    merchants: str = option("--merchants", after="input_topic", default=MasterDataTopics.merchants,
                            show_default=True, help="Merchant profile versions.")  # fmt: skip
    customers: str = option("--customers", after="input_topic", default=MasterDataTopics.customers,
                            show_default=True, help="Customer profile versions.")  # fmt: skip
    lateness_ms: int = option(
        "--lateness", after="input_topic", type=int, default=DEFAULT_LATENESS_MS, show_default=True,
        help="Allowed event-time lateness in ms; older events go to the DLQ as 'late'.",
    )  # fmt: skip
    transforms: Path = option(
        "--transforms", after="input_topic", type=click.Path(path_type=Path, dir_okay=False),
        default=TRANSFORMS_SPEC, show_default=True, help="Transform spec file (YAML).",
    )  # fmt: skip
    master_data_timeout_s: float = option(
        "--master-data-timeout", after="replay_requests", type=float, default=600.0, show_default=True,
        help="Seconds a batch waits for unreadable master data; then the job stops.",
    )  # fmt: skip

    def job(self) -> EnrichJob:
        return EnrichJob(
            events_topic=self.events_topic, dlq_topic=self.dlq_topic,
            master_data=MasterDataTopics(self.merchants, self.customers), lateness_ms=self.lateness_ms,
            transforms=self.transforms, master_data_timeout_s=self.master_data_timeout_s,
        )  # fmt: skip


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click_options(EnrichOptions)
def main(**given: Any) -> None:
    """Run the enrich job until the input is drained (or forever with --continuous)."""
    run(EnrichOptions(**given))


def run(given: EnrichOptions) -> None:
    """The job's run: its spec checked before Spark or Kafka is touched, the cluster, its topics, then the query."""
    job = given.job()
    load_enrich_spec(given.transforms)  # a bad spec fails here, before Spark or Kafka are touched
    master_topics = MoreTopics((given.merchants, given.customers), 1, MASTER_TOPIC_CONFIG)  # master_data's own layout
    options = opened(job.name, given, given.query, job.output_topics, more_topics=master_topics)
    run_job(options, job)


if __name__ == "__main__":
    main_entry(main)

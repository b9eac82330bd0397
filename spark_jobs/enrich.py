"""The enrich job: ingest.payments (raw JSON lines) → events.payments (Avro) + dlq.enrich, in one transaction.

    python -m spark_jobs.enrich --checkpoint DIR [--bootstrap HOST:PORT] [--lateness 10000] ...

The stages of one micro-batch (docs/enrich.md is the user's guide):

1. The Kafka source reads ``ingest.payments`` with ``kafka.isolation.level=read_committed``.
2. Per input partition, in offset order (``applyInPandasWithState`` keyed by the partition):
   parse and validate each record (``enrich_parse``), then the event-time rules (``enrich_dedupe``:
   late beyond the watermark, duplicate event_id, stale status update). The gate's state lives in
   Spark's state store, so a restart resumes it at the checkpointed batch. Decisions do not depend
   on batch boundaries, so a crash-restart or a replay into fresh topics decides the same.
3. The transforms of the spec file (``--transforms``, default ``enrich_transforms.yaml``) run on
   the valid events, which have the columns ``enrich_records.TRANSFORM_COLUMNS`` (``ikkai transforms
   check`` checks a spec against the same list): amount to minor units, card masking, merchant category.
4. Each event is joined with its merchant's and customer's profile versions as of its event time
   and ingest time (``enrich_asof``; the versions are read once per batch on the driver and
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

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ikkai.contract import topics
from ikkai.contract.codec import RecordCodec, default_codec
from ikkai.contract.wire_format import environment_codec
from ikkai.resources import package_file
from spark_jobs.enrich_asof import MasterData, MasterDataTopics, join_as_of
from spark_jobs.enrich_dedupe import DEFAULT_LATENESS_MS
from spark_jobs.enrich_records import (
    CLASSIFIED_SCHEMA,
    EVENT,
    GATE_STATE_SCHEMA,
    ORDER_BY,
    SINK_SCHEMA,
    TRANSFORM_COLUMNS,
    Settings,
    classify_with_state,
    encode_dead_letters,
    encode_events,
)
from spark_jobs.input_identity import input_recreated_option, input_topic_id, rebase_on_recreated_input
from spark_jobs.job_shell import (
    DEFAULT_TRIGGER_INTERVAL,
    MODES,
    batch_bound_options,
    batch_writer,
    bootstrap_servers,
    continuous_options,
    crash_hook,
    default_max_offsets_per_trigger,
    default_max_transaction_bytes,
    ensure_topics,
    kafka_source,
    main_entry,
    pinned_partitions,
    retry_deadline_s,
    run_until_done,
    stream_trigger,
)
from spark_jobs.master_data import ensure_master_topics
from spark_jobs.partition_transactions import DEFAULT_TRANSACTION_TIMEOUT_MS
from spark_jobs.query_handover import handover_options
from spark_jobs.transactional_sink import AtLeastOnceBatchWriter, SinkConfig, TransactionalBatchWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from transforms import TransformPipeline

TRANSFORMS_SPEC = package_file("spark_jobs", "enrich_transforms.yaml")  # also inside the submit zip
PARSE_A_NEW_FIELD = (
    "a raw field the enrich job does not parse yet is a change to the job itself "
    "(spark_jobs/enrich_parse.py and enrich_records.PARSED_COLUMNS), not to a transform"
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
class EnrichOptions:
    bootstrap_servers: str
    checkpoint: Path
    input_topic: str = topics.INGEST_PAYMENTS
    events_topic: str = topics.EVENTS_PAYMENTS
    dlq_topic: str = topics.DLQ_ENRICH
    master_data: MasterDataTopics = field(default_factory=MasterDataTopics)
    partitions: int | None = None
    lateness_ms: int = DEFAULT_LATENESS_MS
    transforms: Path = TRANSFORMS_SPEC
    mode: str = "exactly-once"
    app: str = "ikkai"
    query: str = "enrich"
    available_now: bool = True
    trigger_interval: str = DEFAULT_TRIGGER_INTERVAL  # with available_now False
    max_offsets_per_trigger: int | None = None  # None: default_max_offsets_per_trigger(transaction_timeout_ms)
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    master_data_timeout_s: float = 600.0
    master: str = "local[2]"
    crash_after_batch: int | None = None  # fault injection for tests: SIGKILL itself after this batch's write
    input_recreated: str = ""  # --input-recreated: the recreated input topic's id, to start over on it
    after_query: str = ""  # a new query taking over another's output (query_handover)
    start_offsets: dict[int, int] = field(default_factory=dict)  # or told where to start


def writer_version(lateness_ms: int, exponents: Mapping[str, int], transforms: Path) -> str:
    """What decides enrich's output besides its input, as the markers' ``writer_version``.

    The lateness in clear, and a digest of the currency exponents and the transform spec's bytes:
    restarting the query with another of them is a cutover, recorded where it took over.
    """
    digest = hashlib.sha256(json.dumps(dict(sorted(exponents.items()))).encode() + b"\0" + transforms.read_bytes())
    return f"enrich-lateness{lateness_ms}-{digest.hexdigest()[:12]}"


class EnrichBatch:
    """The ``foreachBatch`` function: transforms, master-data join, encoding, then the sink's write."""

    def __init__(
        self,
        settings: Settings,
        master_data: MasterData,
        pipeline: TransformPipeline,
        writer: TransactionalBatchWriter | AtLeastOnceBatchWriter,
        codec: RecordCodec | None = None,
    ) -> None:
        self.settings = settings
        self.codec = codec or default_codec()
        self.master_data = master_data
        self.pipeline = pipeline
        self.writer = writer

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        settings, codec = self.settings, self.codec
        snapshot = batch.sparkSession.sparkContext.broadcast(self.master_data.snapshot(batch.sparkSession))
        batch = batch.persist()  # the state store is updated once; events and dead letters read the same rows
        try:
            events = self.pipeline.apply(
                batch.where(F.col("outcome") == EVENT).select(*(name for name, _ in TRANSFORM_COLUMNS))
            )
            rows = events.mapInPandas(
                lambda c: encode_events((join_as_of(chunk, snapshot.value) for chunk in c), codec, settings),
                SINK_SCHEMA,
            ).unionByName(
                batch.where(F.col("outcome") != EVENT).mapInPandas(
                    lambda c: encode_dead_letters(c, codec, settings), SINK_SCHEMA
                )
            )
            self.writer(rows, batch_id)
        finally:
            batch.unpersist()
            snapshot.unpersist()


def start_query(spark: SparkSession, options: EnrichOptions) -> StreamingQuery:
    from pyspark.sql import functions as F

    from transforms import CURRENCY_EXPONENTS

    pipeline = load_enrich_spec(options.transforms)  # a bad spec or a missing column stops the job here
    partitions = pinned_partitions(
        "enrich", options.bootstrap_servers, options.partitions, options.events_topic, options.input_topic
    )
    settings = Settings(options.input_topic, options.events_topic, options.dlq_topic, partitions,
                        options.lateness_ms, dict(CURRENCY_EXPONENTS))  # fmt: skip
    sys.stderr.write(
        f"{options.query}: {partitions} partitions, lateness {options.lateness_ms} ms, transforms "
        f"{', '.join(pipeline.names)}, mode {options.mode}\n"
    )
    bound = options.max_offsets_per_trigger or default_max_offsets_per_trigger(options.transaction_timeout_ms)
    source = kafka_source(spark, options.bootstrap_servers, options.input_topic, bound)
    classified = (
        source.select("key", "value", "partition", "offset", F.unix_millis("timestamp").alias("ingested_at"))
        .groupBy("partition")
        .applyInPandasWithState(
            classify_with_state(settings), CLASSIFIED_SCHEMA, GATE_STATE_SCHEMA, "update", "NoTimeout"
        )
    )
    config = SinkConfig(
        app=options.app, query=options.query, bootstrap_servers=options.bootstrap_servers,
        output_topics=(options.events_topic, options.dlq_topic), partitions=partitions, order_by=ORDER_BY,
        source_topic=options.input_topic, transaction_timeout_ms=options.transaction_timeout_ms,
        retry_deadline_s=retry_deadline_s(options.transaction_timeout_ms),
        # No input may stop the job: the input by id (a recreated topic is refused), a record too large for
        # the producer set aside as a dead letter, transactions bounded in bytes too.
        source_topic_id=input_topic_id("enrich", options.bootstrap_servers, options.input_topic),
        input_recreated=options.input_recreated, dlq_topic=options.dlq_topic, dlq_stage="enrich",
        dead_letter_codec=environment_codec(),
        max_transaction_bytes=default_max_transaction_bytes(options.transaction_timeout_ms),
        writer_version=writer_version(options.lateness_ms, settings.exponents, options.transforms),
        after_query=options.after_query, start_offsets=options.start_offsets,
    )  # fmt: skip
    writer = batch_writer(options.mode, config, crash_hook(options.query, options.crash_after_batch))
    if options.mode == "exactly-once":
        rebase_on_recreated_input(config, options.checkpoint)  # --input-recreated: start over on the new topic
    writer.prepare(spark)
    codec = environment_codec()  # the wire format (IKKAI_SCHEMA_REGISTRY_URL), chosen once on the driver
    master_data = MasterData(options.bootstrap_servers, options.master_data, options.master_data_timeout_s, codec)
    batch = EnrichBatch(settings, master_data, pipeline, writer, codec)
    stream = classified.writeStream.queryName(options.query).option("checkpointLocation", str(options.checkpoint))
    trigger = stream_trigger(options.available_now, options.trigger_interval)
    return stream.outputMode("update").foreachBatch(batch).trigger(**trigger).start()


def run_enrich(options: EnrichOptions) -> None:
    run_until_done(f"{options.app}-{options.query}", options.master, lambda spark: start_query(spark, options))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--bootstrap", help="Kafka bootstrap servers [default: IKKAI_BOOTSTRAP_SERVERS, else the local stack].")
@click.option(
    "--checkpoint",
    type=click.Path(path_type=Path),
    help="Spark checkpoint folder [default: $IKKAI_HOME/checkpoints/<query>].",
)
@click.option("--input", "input_topic", default=topics.INGEST_PAYMENTS, show_default=True)
@click.option("--output", "events_topic", default=topics.EVENTS_PAYMENTS, show_default=True)
@click.option("--dlq", default=topics.DLQ_ENRICH, show_default=True)
@click.option("--merchants", default=MasterDataTopics.merchants, show_default=True, help="Merchant profile versions.")
@click.option("--customers", default=MasterDataTopics.customers, show_default=True, help="Customer profile versions.")
@click.option("--lateness", type=int, default=DEFAULT_LATENESS_MS, show_default=True,
              help="Allowed event-time lateness in ms; older events go to the DLQ as 'late'.")  # fmt: skip
@click.option("--transforms", "transforms_spec", type=click.Path(path_type=Path, dir_okay=False),
              default=TRANSFORMS_SPEC, show_default=True, help="Transform spec file (YAML).")  # fmt: skip
@click.option("--partitions", type=int, help="Pinned partition count of every topic [default: the events topic's].")
@click.option("--create-topics", is_flag=True, help="Create missing topics with --partitions partitions first.")
@click.option("--mode", type=click.Choice(MODES), default="exactly-once", show_default=True)
@click.option("--query", default="enrich", show_default=True, help="Query name; part of every transactional.id.")
@handover_options
@input_recreated_option
@continuous_options
@batch_bound_options
@click.option("--master-data-timeout", type=float, default=600.0, show_default=True,
              help="Seconds a batch waits for unreadable master data; then the job stops.")  # fmt: skip
@click.option("--master", default="local[2]", show_default=True)
@click.option("--crash-after-batch", type=int, hidden=True)
def main(**kw: Any) -> None:
    """Run the enrich job until the input is drained (or forever with --continuous)."""
    from ikkai.settings import ikkai_home

    load_enrich_spec(kw["transforms_spec"])  # a bad spec fails here, before Spark or Kafka are touched
    bootstrap = bootstrap_servers("enrich", kw["bootstrap"])
    if kw["create_topics"]:
        if not kw["partitions"]:
            raise click.UsageError("--create-topics needs --partitions")
        ensure_topics(bootstrap, [kw["input_topic"], kw["events_topic"], kw["dlq"]], kw["partitions"])
        ensure_master_topics(bootstrap, merchants_topic=kw["merchants"], customers_topic=kw["customers"])
    run_enrich(EnrichOptions(
        bootstrap_servers=bootstrap, checkpoint=kw["checkpoint"] or ikkai_home() / "checkpoints" / kw["query"],
        input_topic=kw["input_topic"], events_topic=kw["events_topic"], dlq_topic=kw["dlq"],
        master_data=MasterDataTopics(kw["merchants"], kw["customers"]), partitions=kw["partitions"],
        lateness_ms=kw["lateness"], transforms=kw["transforms_spec"], mode=kw["mode"], query=kw["query"],
        available_now=not kw["continuous"], trigger_interval=kw["trigger_interval"],
        max_offsets_per_trigger=kw["max_offsets_per_trigger"],
        transaction_timeout_ms=kw["transaction_timeout_ms"],
        master_data_timeout_s=kw["master_data_timeout"], master=kw["master"], crash_after_batch=kw["crash_after_batch"],
        input_recreated=kw["input_recreated"],
        after_query=kw["after_query"], start_offsets=kw["start_offsets"],
    ))  # fmt: skip


if __name__ == "__main__":
    main_entry(main)

"""The infer job: events.payments → decisions.fraud + outbox.requests, in one Kafka transaction.

    python -m spark_jobs.infer --checkpoint DIR [--bootstrap HOST:PORT] [--mode exactly-once] ...

(``ikkai jobs run infer`` starts exactly this as its own process.) The Kafka source reads with
``kafka.isolation.level=read_committed``; each micro-batch is scored vectorized (over Arrow
batches) by ``fraud_decisions.decide`` with point-in-time features and written by the
``TransactionalBatchWriter``: per output partition, the decisions, their outbox requests and
the commit marker form one transaction. The model is the sink's ``RowTransform``: one
``mapInArrow`` per task decides the input partition's rows and writes them, in one Python
worker. ``--mode at-least-once`` swaps in Spark's own Kafka sink: the benchmark baseline, which
duplicates output after a crash.

A new model is a cutover of the same query (``--model``): its markers say what is decided, the
rest is decided by the new version, and each marker records the cut (docs/changing-the-model.md).
``--shadow`` runs a candidate as a query of its own into ``<decisions>.shadow`` with no outbox
requests; a new query name over the live topics is refused unless it hands over (``--after-query``).

The layout is pinned: the input topic, decisions, outbox and DLQ topics all have ``--partitions``
partitions (default: the decisions topic's). Output partition p holds the decisions of input
partition p in input-offset order, whatever the batch boundaries: a replay is byte-identical.
The sink writes them in place (``partition_column``), in the stage that scored them, with no
shuffle: the Kafka source gives one Spark task per input partition. Input and output share the
key (payment_id), so when the input was written by Kafka's default partitioner (enrich's sink
is), every output record is also in its key's default partition.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ikkai.contract import topics
from ikkai.contract.wire_format import environment_codec
from spark_jobs.fraud_decisions import ORDER_BY, OUTPUT_SCHEMA, Topics, decide_arrow_batches
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
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, ModelSource
from spark_jobs.partition_transactions import DEFAULT_TRANSACTION_TIMEOUT_MS
from spark_jobs.query_handover import handover_options
from spark_jobs.transactional_sink import RowTransform, SinkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


@dataclass(frozen=True)
class InferOptions:
    bootstrap_servers: str
    checkpoint: Path
    input_topic: str = topics.EVENTS_PAYMENTS
    topics: Topics = field(default_factory=Topics)
    partitions: int | None = None
    mode: str = "exactly-once"
    app: str = "ikkai"
    query: str = "infer"
    available_now: bool = True
    trigger_interval: str = DEFAULT_TRIGGER_INTERVAL  # with available_now False
    max_offsets_per_trigger: int | None = None  # None: default_max_offsets_per_trigger(transaction_timeout_ms)
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    model_path: Path = MODEL_PATH
    features_path: Path = FEATURES_PATH
    master: str = "local[2]"
    crash_after_batch: int | None = None  # fault injection for tests: SIGKILL itself after this batch's write
    input_recreated: str = ""  # --input-recreated: the recreated input topic's id, to start over on it
    after_query: str = ""  # a new query taking over another's output (query_handover)
    start_offsets: dict[int, int] = field(default_factory=dict)  # or told where to start


def start_query(spark: SparkSession, options: InferOptions) -> StreamingQuery:
    topics = options.topics
    partitions = pinned_partitions(
        "infer", options.bootstrap_servers, options.partitions, topics.decisions, options.input_topic
    )
    # After the session: files shipped to it are in place. The job's function carries only where the
    # model and snapshots are and their hashes; each Python worker reads them once (ModelSource.load).
    model_source, model, _ = ModelSource.of(options.model_path, options.features_path)
    shadow = " (shadow: no outbox requests)" if topics.outbox is None else ""
    sys.stderr.write(
        f"{options.query}: model {model.version}, {partitions} partitions, mode {options.mode}, "
        f"decisions to {topics.decisions}{shadow}\n"
    )

    bound = options.max_offsets_per_trigger or default_max_offsets_per_trigger(options.transaction_timeout_ms)
    source = kafka_source(spark, options.bootstrap_servers, options.input_topic, bound)
    # The wire format is chosen here, on the driver (IKKAI_SCHEMA_REGISTRY_URL), and shipped: the codec pickles.
    decide = functools.partial(decide_arrow_batches, source=model_source, topics=topics, codec=environment_codec())
    rows = source.select("key", "value", "topic", "partition", "offset")
    config = SinkConfig(
        app=options.app, query=options.query, bootstrap_servers=options.bootstrap_servers,
        output_topics=topics.written, partitions=partitions, order_by=ORDER_BY,
        source_topic=options.input_topic, transaction_timeout_ms=options.transaction_timeout_ms,
        retry_deadline_s=retry_deadline_s(options.transaction_timeout_ms),
        # No input may stop the job: the input by id (a recreated topic is refused), a record too large for
        # the producer set aside as a dead letter, transactions bounded in bytes too.
        source_topic_id=input_topic_id("infer", options.bootstrap_servers, options.input_topic),
        input_recreated=options.input_recreated, dlq_topic=topics.dlq, dlq_stage="infer",
        dead_letter_codec=environment_codec(),
        max_transaction_bytes=default_max_transaction_bytes(options.transaction_timeout_ms),
        partition_column="input_partition",  # one Spark task per input partition, no shuffle: written in place
        # A new model continues the query from its markers: the marker records the cut (query_handover).
        writer_version=model.version, after_query=options.after_query, start_offsets=options.start_offsets,
    )  # fmt: skip
    # The model runs inside the sink's write task: one mapInArrow per task decides and writes the
    # partition's transaction (at-least-once: a mapInArrow before Spark's own sink, as before).
    after_batch = crash_hook(options.query, options.crash_after_batch)
    writer = batch_writer(options.mode, config, after_batch, RowTransform(decide, OUTPUT_SCHEMA))
    if options.mode == "exactly-once":
        rebase_on_recreated_input(config, options.checkpoint)  # --input-recreated: start over on the new topic
    writer.prepare(spark)
    stream = rows.writeStream.queryName(options.query).option("checkpointLocation", str(options.checkpoint))
    trigger = stream_trigger(options.available_now, options.trigger_interval)
    return stream.foreachBatch(writer).trigger(**trigger).start()


def run_infer(options: InferOptions) -> None:
    run_until_done(f"{options.app}-{options.query}", options.master, lambda spark: start_query(spark, options))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--bootstrap", help="Kafka bootstrap servers [default: IKKAI_BOOTSTRAP_SERVERS, else the local stack].")
@click.option(
    "--checkpoint",
    type=click.Path(path_type=Path),
    help="Spark checkpoint folder [default: $IKKAI_HOME/checkpoints/<query>].",
)
@click.option("--input", "input_topic", default=topics.EVENTS_PAYMENTS, show_default=True)
@click.option("--decisions", default=topics.DECISIONS_FRAUD, show_default=True)
@click.option("--outbox", default=topics.OUTBOX_REQUESTS, show_default=True)
@click.option("--dlq", default=topics.DLQ_INFER, show_default=True)
@click.option("--partitions", type=int, help="Pinned partition count of every topic [default: the decisions topic's].")
@click.option("--create-topics", is_flag=True, help="Create missing topics with --partitions partitions first.")
@click.option("--mode", type=click.Choice(MODES), default="exactly-once", show_default=True)
@click.option(
    "--query", help="Query name; part of every transactional.id [default: infer, with --shadow infer.shadow]."
)
@click.option(
    "--shadow", is_flag=True,
    help="Run a candidate model beside the live one: decisions to <decisions>.shadow, dead letters to "
    "<dlq>.shadow, no outbox requests (compare with `ikkai jobs compare`).",
)  # fmt: skip
@handover_options
@input_recreated_option
@continuous_options
@batch_bound_options
@click.option("--master", default="local[2]", show_default=True)
@click.option(
    "--model", help="Model artifact (model.json) [default: the shipped one, spark_jobs/model/artifacts/fraud]."
)
@click.option("--features", help="Feature snapshots (CSV) [default: the model's customer_features.csv].")
@click.option("--crash-after-batch", type=int, hidden=True)
def main(**kw: Any) -> None:
    """Run the infer job until the input is drained (or forever with --continuous)."""
    from ikkai.settings import ikkai_home

    bootstrap = bootstrap_servers("infer", kw["bootstrap"])
    topics = Topics(kw["decisions"], kw["outbox"], kw["dlq"])
    if kw["shadow"]:
        topics = topics.shadow()
    query = kw["query"] or ("infer.shadow" if kw["shadow"] else "infer")
    if kw["create_topics"]:
        if not kw["partitions"]:
            raise click.UsageError("--create-topics needs --partitions")
        ensure_topics(bootstrap, [kw["input_topic"], *topics.written], kw["partitions"])
    run_infer(InferOptions(
        bootstrap_servers=bootstrap, checkpoint=kw["checkpoint"] or ikkai_home() / "checkpoints" / query,
        input_topic=kw["input_topic"], topics=topics, partitions=kw["partitions"], mode=kw["mode"], query=query,
        available_now=not kw["continuous"], trigger_interval=kw["trigger_interval"],
        max_offsets_per_trigger=kw["max_offsets_per_trigger"],
        transaction_timeout_ms=kw["transaction_timeout_ms"], master=kw["master"],
        crash_after_batch=kw["crash_after_batch"], input_recreated=kw["input_recreated"],
        model_path=Path(kw["model"]) if kw["model"] else MODEL_PATH,
        features_path=Path(kw["features"]) if kw["features"] else FEATURES_PATH,
        after_query=kw["after_query"], start_offsets=kw["start_offsets"],
    ))  # fmt: skip


if __name__ == "__main__":
    main_entry(main)

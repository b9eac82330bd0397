"""The infer job: events.payments → decisions.fraud + outbox.requests, in one Kafka transaction.

    python -m spark_jobs.infer --checkpoint DIR [--bootstrap HOST:PORT] [--mode exactly-once] ...

(``ikkai jobs run infer`` starts exactly this as its own process.) The Kafka source reads with
``kafka.isolation.level=read_committed``; each micro-batch is scored vectorized (``mapInPandas``
over Arrow chunks) by ``fraud_decisions.decide`` with point-in-time features, and written by the
``TransactionalBatchWriter``: per output partition, the decisions, their outbox requests and
the commit marker form one transaction. ``--mode at-least-once`` swaps in Spark's own Kafka
sink: the benchmark baseline, which duplicates output after a crash.

The layout is pinned: the input topic, decisions, outbox and DLQ topics all have ``--partitions``
partitions (default: the decisions topic's). Input and output share the key (payment_id) and
Kafka's default partitioner, so output partition p holds the decisions of input partition p in
input-offset order, whatever the batch boundaries: a replay is byte-identical.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ikkai.errors import ConfigError
from spark_jobs.fraud_decisions import ORDER_BY, OUTPUT_SCHEMA, Topics, decide_batches
from spark_jobs.fraud_model import FEATURES_PATH, MODEL_PATH, FraudModel, load_snapshots
from spark_jobs.serialization import default_codec
from spark_jobs.shipping import shipped_path
from spark_jobs.transactional_sink import AtLeastOnceBatchWriter, PartitionResult, SinkConfig, TransactionalBatchWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

MODES = ("exactly-once", "at-least-once")


@dataclass(frozen=True)
class InferOptions:
    bootstrap_servers: str
    checkpoint: Path
    input_topic: str = "events.payments"
    topics: Topics = field(default_factory=Topics)
    partitions: int | None = None
    mode: str = "exactly-once"
    app: str = "ikkai"
    query: str = "infer"
    available_now: bool = True
    max_offsets_per_trigger: int | None = None
    model_path: Path = MODEL_PATH
    features_path: Path = FEATURES_PATH
    master: str = "local[2]"
    crash_after_batch: int | None = None  # fault injection for tests: SIGKILL itself after this batch's write


def topic_partitions(bootstrap: str, topic: str) -> int | None:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics.get(topic)
    return None if metadata is None or metadata.error is not None else len(metadata.partitions)


def ensure_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create the missing ones with ``partitions`` partitions (topics are never auto-created)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    missing = [n for n in names if topic_partitions(bootstrap, n) is None]
    for name, future in admin.create_topics([NewTopic(n, partitions, -1) for n in missing]).items() if missing else []:
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConfigError("kafka", name, f"cannot create the topic: {exc}") from exc


def _crash_hook(options: InferOptions) -> Any:
    def after_batch(batch_id: int, _: list[PartitionResult]) -> None:
        if options.crash_after_batch is not None and batch_id >= options.crash_after_batch:
            sys.stderr.write(f"{options.query}: fault injection: SIGKILL after batch {batch_id}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    return after_batch


def start_query(spark: SparkSession, options: InferOptions) -> StreamingQuery:
    topics = options.topics
    partitions = options.partitions or topic_partitions(options.bootstrap_servers, topics.decisions)
    if partitions is None:
        raise ConfigError("infer", "--partitions", f"the decisions topic {topics.decisions} does not exist",
                          fix="create the topics (--create-topics) or pass --partitions")  # fmt: skip
    input_partitions = topic_partitions(options.bootstrap_servers, options.input_topic)
    if input_partitions != partitions:
        raise ConfigError("infer", options.input_topic, f"has {input_partitions} partitions, the job {partitions}",
                          fix="input and output topics must share one partition layout")  # fmt: skip
    model = FraudModel.load(shipped_path(options.model_path))  # after the session: files shipped to it are in place
    snapshots = load_snapshots(shipped_path(options.features_path))
    codec = default_codec()
    sys.stderr.write(f"{options.query}: model {model.version}, {partitions} partitions, mode {options.mode}\n")

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", options.bootstrap_servers)
        .option("subscribe", options.input_topic)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if options.max_offsets_per_trigger:
        source = source.option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
    scored = (
        source.load()
        .select("key", "value", "topic", "partition", "offset")
        .mapInPandas(lambda chunks: decide_batches(chunks, model, snapshots, codec, topics), OUTPUT_SCHEMA)
    )
    writer: TransactionalBatchWriter | AtLeastOnceBatchWriter
    if options.mode == "exactly-once":
        config = SinkConfig(
            app=options.app, query=options.query, bootstrap_servers=options.bootstrap_servers,
            output_topics=(topics.decisions, topics.outbox, topics.dlq), partitions=partitions, order_by=ORDER_BY,
        )  # fmt: skip
        writer = TransactionalBatchWriter(config, after_batch=_crash_hook(options))
    else:
        writer = AtLeastOnceBatchWriter(
            options.bootstrap_servers, after_batch=_crash_hook(options), query=options.query
        )
    writer.prepare(spark)
    stream = scored.writeStream.queryName(options.query).option("checkpointLocation", str(options.checkpoint))
    trigger = {"availableNow": True} if options.available_now else {"processingTime": "1 second"}
    return stream.foreachBatch(writer).trigger(**trigger).start()


def run_infer(options: InferOptions) -> None:
    from spark_jobs.session import spark_session

    spark = spark_session(f"{options.app}-{options.query}", master=options.master)
    try:
        start_query(spark, options).awaitTermination()
    finally:
        spark.stop()


def default_bootstrap() -> str:
    from deploy.runtime import select_stack

    endpoints = select_stack().endpoints()
    if endpoints is None:
        raise ConfigError(
            "infer", "--bootstrap", "no cluster configured", fix="run `ikkai stack up` or pass --bootstrap"
        )
    return endpoints.bootstrap_servers


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--bootstrap", help="Kafka bootstrap servers [default: IKKAI_BOOTSTRAP_SERVERS, else the local stack].")
@click.option(
    "--checkpoint",
    type=click.Path(path_type=Path),
    help="Spark checkpoint folder [default: $IKKAI_HOME/checkpoints/<query>].",
)
@click.option("--input", "input_topic", default="events.payments", show_default=True)
@click.option("--decisions", default="decisions.fraud", show_default=True)
@click.option("--outbox", default="outbox.requests", show_default=True)
@click.option("--dlq", default="dlq.infer", show_default=True)
@click.option("--partitions", type=int, help="Pinned partition count of every topic [default: the decisions topic's].")
@click.option("--create-topics", is_flag=True, help="Create missing topics with --partitions partitions first.")
@click.option("--mode", type=click.Choice(MODES), default="exactly-once", show_default=True)
@click.option("--query", default="infer", show_default=True, help="Query name; part of every transactional.id.")
@click.option("--continuous", is_flag=True, help="Keep running (1 s trigger) instead of stopping when caught up.")
@click.option("--max-offsets-per-trigger", type=int, help="Bound each micro-batch (keeps transactions short).")
@click.option("--master", default="local[2]", show_default=True)
@click.option("--model", help="Model artifact (model.json) [default: models/fraud/model.json of this checkout].")
@click.option("--features", help="Feature snapshots (CSV) [default: the model's customer_features.csv].")
@click.option("--crash-after-batch", type=int, hidden=True)
def main(**kw: Any) -> None:
    """Run the infer job until the input is drained (or forever with --continuous)."""
    from deploy.settings import ikkai_home

    bootstrap = kw["bootstrap"] or os.environ.get("IKKAI_BOOTSTRAP_SERVERS") or default_bootstrap()
    topics = Topics(kw["decisions"], kw["outbox"], kw["dlq"])
    if kw["create_topics"]:
        if not kw["partitions"]:
            raise click.UsageError("--create-topics needs --partitions")
        ensure_topics(bootstrap, [kw["input_topic"], topics.decisions, topics.outbox, topics.dlq], kw["partitions"])
    run_infer(InferOptions(
        bootstrap_servers=bootstrap, checkpoint=kw["checkpoint"] or ikkai_home() / "checkpoints" / kw["query"],
        input_topic=kw["input_topic"], topics=topics, partitions=kw["partitions"], mode=kw["mode"], query=kw["query"],
        available_now=not kw["continuous"], max_offsets_per_trigger=kw["max_offsets_per_trigger"], master=kw["master"],
        crash_after_batch=kw["crash_after_batch"],
        model_path=Path(kw["model"]) if kw["model"] else MODEL_PATH,
        features_path=Path(kw["features"]) if kw["features"] else FEATURES_PATH,
    ))  # fmt: skip


if __name__ == "__main__":
    from ikkai.errors import IkkaiError

    try:
        main(standalone_mode=True)
    except IkkaiError as exc:
        sys.stderr.write(f"ikkai: error: {exc}\n")
        sys.exit(1)

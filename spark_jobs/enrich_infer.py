"""Enrich and infer as ONE query (experimental): raw lines → events, dead letters, decisions and outbox requests.

    python -m spark_jobs.enrich_infer --checkpoint DIR [enrich's options] [--decisions T] [--outbox T] [--dlq-infer T]

Enrich's query (``spark_jobs.enrich``: parse, gate, transforms, master data, encoding) with the infer job's
decision (``infer.fraud_decisions.decided``) added to its sink's write step as the sink's ``RowTransform``:
each micro-batch's events are decided in the task that writes them, and every event, its decision and its
outbox requests go to their output partition in the same Kafka transaction, with enrich's commit marker.
A line is decided in the batch that enriches it, instead of waiting for enrich's batch and then infer's.
``events.payments`` is still written, the same bytes, for every other consumer.

What it does not cover (the two jobs do): infer's own start (its query, markers and handover are enrich's
here), a replay (``--replay-requests`` is refused: a replay's recorded model cut is infer's), a shadow model,
and the decisions' ``input_topic``/``input_offset``, which name the raw line in the ingest topic (the event's
offset is not known before its transaction commits). The writer version is enrich's and the model's together:
a new model is a cutover the markers record, as for enrich's settings.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click

from ikkai.contract.codec import RecordCodec
from ikkai.contract.markers import deciding_version
from ikkai.contract.topics import DECISIONS_FRAUD, DLQ_INFER, OUTBOX_REQUESTS
from ikkai.contract.wire_format import environment_codec
from ikkai.errors import ConfigError
from ikkai.settings import ikkai_home
from spark_jobs.enrich.job import EnrichJob, EnrichOptions, load_enrich_spec
from spark_jobs.enrich.master_data import TOPIC_CONFIG as MASTER_TOPIC_CONFIG
from spark_jobs.enrich.records import SINK_SCHEMA
from spark_jobs.infer.fraud_decisions import OUTPUT_SCHEMA, SourceRows, Topics, decided
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, ModelSource
from spark_jobs.model.model_store import keep
from spark_jobs.options import click_options, option
from spark_jobs.sink.transactional_sink import RowTransform
from spark_jobs.streaming_job import BatchPlan, main_entry, run_job
from spark_jobs.streaming_options import MoreTopics, StreamingOptions, opened

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import SparkSession

assert SINK_SCHEMA == OUTPUT_SCHEMA, "enrich's sink rows and infer's output rows must be one schema"


def events_and_decisions(
    batches: Iterator[pa.RecordBatch], events_topic: str, input_topic: str, source: ModelSource, outputs: Topics,
    codec: RecordCodec,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``mapInArrow`` in the write task: enrich's rows as they are, then the decisions of its events.

    A decision and its outbox requests follow their event (``seq`` 1, 2, ... after the event's 0) and
    name the raw line (``input_partition``, ``input_offset``), so the sink's order and marker cover them
    with the event in one transaction. Keys are the event's (payment_id): the same output partition.
    """
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    model, snapshots = source.load()
    for batch in batches:
        if not batch.num_rows:
            continue
        yield batch
        events = batch.filter(pc.equal(batch.column("topic"), events_topic))
        if not events.num_rows:
            continue
        rows = SourceRows(
            events.column("key").to_pylist(), events.column("value").to_pylist(), [input_topic] * events.num_rows,
            events.column("input_partition").to_pylist(), events.column("input_offset").to_pylist(),
        )  # fmt: skip
        out = decided(rows, model, snapshots, codec, outputs)
        out.seq = [seq + 1 for seq in out.seq]  # after the event's own row (seq 0)
        if out.topic:
            yield out.to_arrow()


@dataclass(frozen=True)
class EnrichInferJob:
    """Enrich's job, its sink also writing the decisions of its events (the module docstring)."""

    name: ClassVar[str] = "enrich"  # the dead letters' stage and the refusals: enrich's query
    enrich: EnrichJob = field(default_factory=EnrichJob)
    outputs: Topics = field(default_factory=Topics)
    model_path: Path = MODEL_PATH
    features_path: Path = FEATURES_PATH
    model_store: Path = field(default_factory=lambda: ikkai_home() / "models")

    @property
    def layout_topic(self) -> str:
        return self.enrich.layout_topic

    @property
    def output_topics(self) -> tuple[str, ...]:
        return (*self.enrich.output_topics, *self.outputs.written)

    def suffixed(self, suffix: str) -> EnrichInferJob:
        outbox = None if self.outputs.outbox is None else self.outputs.outbox + suffix
        decided_to = Topics(self.outputs.decisions + suffix, outbox, self.outputs.dlq + suffix)
        return dataclasses.replace(self, enrich=self.enrich.suffixed(suffix), outputs=decided_to)

    def plan(self, spark: SparkSession, options: StreamingOptions, partitions: int) -> BatchPlan:
        if options.replay_requests is not None or options.replay_of:
            raise ConfigError("enrich_infer", "--replay-requests", "a replay of the one query is not supported: "
                              "its decisions would not follow the model versions the live markers record",
                              fix="run enrich and infer as two jobs to replay")  # fmt: skip
        enriched = self.enrich.plan(spark, options, partitions)
        model_source, model, _ = ModelSource.of(self.model_path, self.features_path)
        keep(self.model_store, model_source)  # as the infer job: every version that decided is kept
        sys.stderr.write(f"{options.query}: one query, model {model.version}, decisions to {self.outputs.decisions}\n")
        decide = functools.partial(
            events_and_decisions, events_topic=self.enrich.events_topic, input_topic=options.input_topic,
            source=model_source, outputs=self.outputs, codec=environment_codec(),
        )  # fmt: skip
        version = deciding_version("enrich-infer", enriched.writer_version.encode(), model.version.encode())
        return dataclasses.replace(
            enriched, output_topics=self.output_topics, writer_version=version,
            transform=RowTransform(decide, SINK_SCHEMA),
        )  # fmt: skip


@dataclass(frozen=True)
class EnrichInferOptions(EnrichOptions):
    """Enrich's command line, plus where the decisions go and which model decides (infer's options)."""

    query: str = option("--query", default="enrich-infer", show_default=True,
                        help="Query name; part of every transactional.id.")  # fmt: skip
    decisions: str = option("--decisions", after="input_topic", default=DECISIONS_FRAUD, show_default=True)
    outbox: str = option("--outbox", after="input_topic", default=OUTBOX_REQUESTS, show_default=True)
    dlq_infer: str = option("--dlq-infer", after="input_topic", default=DLQ_INFER, show_default=True)
    model: str | None = option(
        "--model", after="master", help="Model artifact (model.json) [default: the shipped one]."
    )
    features: str | None = option("--features", after="master", help="Feature snapshots (CSV) [default: the model's].")
    model_store: Path | None = option(
        "--model-store", after="master", type=click.Path(path_type=Path, file_okay=False),
        help="Where every model version that decided is kept [default: $IKKAI_HOME/models].",
    )  # fmt: skip

    def fused(self) -> EnrichInferJob:
        return EnrichInferJob(
            enrich=self.job(), outputs=Topics(self.decisions, self.outbox, self.dlq_infer),
            model_path=Path(self.model) if self.model else MODEL_PATH,
            features_path=Path(self.features) if self.features else FEATURES_PATH,
            model_store=self.model_store or ikkai_home() / "models",
        )  # fmt: skip


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click_options(EnrichInferOptions)
def main(**given: Any) -> None:
    """Experimental: enrich and infer as one query, until the input is drained (or forever with --continuous)."""
    run(EnrichInferOptions(**given))


def run(given: EnrichInferOptions) -> None:
    job = given.fused()
    load_enrich_spec(given.transforms)  # a bad spec fails here, before Spark or Kafka are touched
    master_topics = MoreTopics((given.merchants, given.customers), 1, MASTER_TOPIC_CONFIG)
    options = opened(job.name, given, given.query, job.output_topics, more_topics=master_topics)
    run_job(options, job)


if __name__ == "__main__":
    main_entry(main)

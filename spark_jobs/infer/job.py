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

A new model or corrected snapshots are a cutover of the same query (``--model``, ``--features``):
its markers say what is decided, the rest is decided by the new deciding version (the artifact's and
the snapshots' digest), and each marker records the cut (docs/changing-the-model.md). Every version is
kept in the model store (``--model-store``) first, so a replay (``--replay-requests``) decides each
recorded range with its own version (``recorded_cut``).
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

import dataclasses
import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click

from ikkai.contract.topics import DECISIONS_FRAUD, DLQ_INFER, EVENTS_PAYMENTS, OUTBOX_REQUESTS
from ikkai.contract.wire_format import environment_codec
from ikkai.settings import ikkai_home
from spark_jobs.infer.fraud_decisions import ORDER_BY, OUTPUT_SCHEMA, Topics, decide_arrow_batches
from spark_jobs.infer.recorded_cut import RecordedCut, recorded_cut
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, ModelSource
from spark_jobs.model.model_store import keep
from spark_jobs.options import JobOptions, click_options, option
from spark_jobs.sink.commit_markers import commits_topic_for, read_markers
from spark_jobs.sink.transactional_sink import RowTransform
from spark_jobs.streaming_job import BatchPlan, main_entry, run_job
from spark_jobs.streaming_options import StreamingOptions, opened

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class InferJob:
    """The infer job's own options: where its outputs go and which model decides; the template does the rest."""

    name: ClassVar[str] = "infer"
    outputs: Topics = field(default_factory=Topics)
    model_path: Path = MODEL_PATH
    features_path: Path = FEATURES_PATH
    model_store: Path = field(default_factory=lambda: ikkai_home() / "models")  # every version it decided with

    @property
    def layout_topic(self) -> str:
        return self.outputs.decisions

    def suffixed(self, suffix: str) -> InferJob:
        outputs = self.outputs
        outbox = None if outputs.outbox is None else outputs.outbox + suffix
        return dataclasses.replace(self, outputs=Topics(outputs.decisions + suffix, outbox, outputs.dlq + suffix))

    def plan(self, spark: SparkSession, options: StreamingOptions, partitions: int) -> BatchPlan:
        # After the session: files shipped to it are in place. The job's function carries only where the
        # model and snapshots are and their version; each Python worker reads them once (ModelSource.load).
        model_source, model, _ = ModelSource.of(self.model_path, self.features_path)
        keep(self.model_store, model_source)  # before any decision: a later replay decides its range with it
        outputs = self.outputs
        shadow = " (shadow: no outbox requests)" if outputs.outbox is None else ""
        sys.stderr.write(
            f"{options.query}: model {model.version}, {partitions} partitions, mode {options.mode}, "
            f"decisions to {outputs.decisions}{shadow}\n"
        )
        cut = None
        if options.replay_of:  # a replay decides each offset range with the version the live markers name
            cut = self.recorded_cut(options, model_source, partitions)
        # The wire format is chosen here, on the driver (IKKAI_SCHEMA_REGISTRY_URL), and shipped: the codec pickles.
        decide = functools.partial(
            decide_arrow_batches, source=model_source, topics=outputs, codec=environment_codec(), cut=cut
        )

        def rows(source: DataFrame) -> DataFrame:
            return source.select("key", "value", "topic", "partition", "offset")

        # The model runs inside the sink's write task: one mapInArrow per task decides and writes the
        # partition's transaction (at-least-once: a mapInArrow before Spark's own sink, as before).
        return BatchPlan(
            output_topics=outputs.written, dlq_topic=outputs.dlq, order_by=ORDER_BY,
            writer_version=model.version,  # the deciding version: a new model or snapshot is a cut the markers record
            rows=rows, transform=RowTransform(decide, OUTPUT_SCHEMA),
            partition_column="input_partition",  # one Spark task per input partition, no shuffle: written in place
        )  # fmt: skip

    def recorded_cut(self, options: StreamingOptions, current: ModelSource, partitions: int) -> RecordedCut:
        """The live query's cut as its markers record it now (``spark_jobs.infer.recorded_cut``)."""
        live = options.replay_of
        markers = read_markers(options.cluster, options.app, live, topic=commits_topic_for(options.app, live))
        cut = recorded_cut(markers, current, partitions, self.model_store, live)
        sys.stderr.write(f"{options.query}: replays the cut of {live}: versions {', '.join(cut.versions)}\n")
        return cut


@dataclass(frozen=True)
class InferOptions(JobOptions):
    """The infer job's command line: the shared options (its input, layout topic and query its own), then its own."""

    input_topic: str = option("--input", default=EVENTS_PAYMENTS, show_default=True)
    partitions: int | None = option(
        "--partitions", type=int, help="Pinned partition count of every topic [default: the decisions topic's]."
    )
    query: str | None = option(
        "--query", help="Query name; part of every transactional.id [default: infer, with --shadow infer.shadow]."
    )
    decisions: str = option("--decisions", after="input_topic", default=DECISIONS_FRAUD, show_default=True)
    outbox: str = option("--outbox", after="input_topic", default=OUTBOX_REQUESTS, show_default=True)
    dlq: str = option("--dlq", after="input_topic", default=DLQ_INFER, show_default=True)
    shadow: bool = option(
        "--shadow", after="query", is_flag=True, default=False,
        help="Run a candidate model beside the live one: decisions to <decisions>.shadow, dead letters to "
        "<dlq>.shadow, no outbox requests (compare with `ikkai jobs compare`).",
    )  # fmt: skip
    model: str | None = option(
        "--model", after="master",
        help="Model artifact (model.json) [default: the shipped one, spark_jobs/model/artifacts/fraud].",
    )  # fmt: skip
    features: str | None = option(
        "--features", after="master",
        help="Feature snapshots (CSV) [default: the model's customer_features.csv].",
    )  # fmt: skip
    model_store: Path | None = option(
        "--model-store", after="master", type=click.Path(path_type=Path, file_okay=False),
        help="Where every version the job decides with is kept by version, for a replay to decide each recorded "
        "range with its own [default: $IKKAI_HOME/models].",
    )  # fmt: skip

    @property
    def query_name(self) -> str:
        return self.query or ("infer.shadow" if self.shadow else "infer")

    def job(self) -> InferJob:
        outputs = Topics(self.decisions, self.outbox, self.dlq)
        return InferJob(
            outputs=outputs.shadow() if self.shadow else outputs,
            model_path=Path(self.model) if self.model else MODEL_PATH,
            features_path=Path(self.features) if self.features else FEATURES_PATH,
            model_store=self.model_store or ikkai_home() / "models",
        )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click_options(InferOptions)
def main(**given: Any) -> None:
    """Run the infer job until the input is drained (or forever with --continuous)."""
    run(InferOptions(**given))


def run(given: InferOptions) -> None:
    """The job's run: the cluster resolved and checked, ``--create-topics`` done, then the query."""
    job = given.job()
    options = opened(job.name, given, given.query_name, job.outputs.written, shadow=given.shadow)
    run_job(options, job)


if __name__ == "__main__":
    main_entry(main)

"""The sink's side of a query's start, in one downward pass: ``prepare_sink``.

The streaming-job template builds the query's ``SinkConfig`` and a ``SinkStart`` (what the start needs
besides it) and calls ``prepare_sink`` once, before the query starts. In this order:

1. the query's own markers, read once for the whole start (``commit_markers.read_markers``); the input by id
   (``input_identity.input_topic_id``): every marker records it, a recreated topic is refused;
2. ``--input-recreated``: markers of the old topic rebased to offset 0 of the new one
   (``input_identity.start_over``, which gives the markers as they are after it);
3. the writer: the exactly-once ``TransactionalBatchWriter``, or Spark's own at-least-once sink (the benchmarks'
   baseline: it makes no exactly-once promise, and the steps 2 and 4 are not taken);
4. the writer's checks and claim (``start_checks``, then ``start_pass``, over the markers read once), after the
   streamed rows' plan (``TransactionalBatchWriter.check_stream``): speculation off, a grown layout, the commits
   topic, the layout and the topics' size limits, the rest of what the markers forbid (another layout or input, a
   handover done, other topics: ``grown_layout.refuse_by_own_markers``), then the outputs claimed (a handover's
   fencing, each partition's start).

A query started with ``--sink-api data-source`` then attaches the prepared writer as a Python data source's
stream writer (``stream_writer.attach_data_source``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.sink.commit_markers import read_markers
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.input_identity import input_topic_id, start_over
from spark_jobs.sink.partition_transactions import PartitionResult
from spark_jobs.sink.transactional_sink import AtLeastOnceBatchWriter, TransactionalBatchWriter
from spark_jobs.sink.write_tasks import RowTransform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BatchWriter = TransactionalBatchWriter | AtLeastOnceBatchWriter
AfterBatch = Callable[[int, list[PartitionResult]], None]
EXACTLY_ONCE = "exactly-once"


@dataclass(frozen=True)
class SinkStart:
    """What the sink's start needs besides its ``SinkConfig``: derived from the job's options and plan."""

    job: str  # the job in refusals: enrich, infer
    mode: str  # exactly-once, or at-least-once (Spark's own sink)
    checkpoint: Path | str  # the query's Spark checkpoint: --input-recreated needs a fresh one
    after_batch: AfterBatch | None = None  # the tests' fault injection (streaming_job.crash_hook)
    transform: RowTransform | None = None  # run inside the sink's write task (infer's model)
    rows: DataFrame | None = None  # the streamed rows, when the writer gets their micro-batches as they are


def prepare_sink(spark: SparkSession, config: SinkConfig, start: SinkStart) -> BatchWriter:
    """The query's writer, checked and prepared before the query starts (the module docstring's order).

    What the start reads from Kafka before it writes is read here, once: the input's id and the query's own
    markers; the steps below take them as plain values.
    """
    exactly_once = start.mode == EXACTLY_ONCE
    own = read_markers(config.cluster, config.app, config.query, topic=config.commits_topic) if exactly_once else {}
    config = dataclasses.replace(config, source_topic_id=input_topic_id(start.job, config.cluster, config.source_topic))
    # --input-recreated: start over on the new topic; the markers as they are after it
    markers = start_over(config, own, start.checkpoint, spark)[0] if exactly_once else {}
    if not exactly_once:  # Spark's own at-least-once sink, the benchmarks' baseline: nothing to prepare
        return AtLeastOnceBatchWriter(config.cluster, after_batch=start.after_batch, query=config.query,
                                      transform=start.transform)  # fmt: skip
    writer = TransactionalBatchWriter(config, after_batch=start.after_batch, transform=start.transform)
    writer.start(spark, markers, start.rows)
    return writer

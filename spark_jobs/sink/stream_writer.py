"""The exactly-once sink as a Python Data Source streaming writer: a trial of ``foreachBatch``'s alternative.

``writeStream.format("ikkai_transactional")`` in place of ``foreachBatch``: Spark runs the sink's
``write`` once per task of the micro-batch's one stage (Arrow batches in, a commit message out) and
``commit`` once per batch on the driver (``DataSourceStreamArrowWriter``, PySpark 4.1+). The jobs
choose it with the hidden ``--sink-api data-source``; only the written-in-place path is supported
(infer: the model is the sink's ``RowTransform``, rows already in their output partition).

Each task does exactly what the ``foreachBatch`` path's fused ``mapInArrow`` does (``write_in_place``:
decide the task's rows, then one Kafka transaction with its commit marker), so the exactly-once
protocol is the same and the markers are the same records. What changes is around it: no Python
callback into the driver per batch, no DataFrame built, analysed and collected per batch, no check of
the plan before the tasks run. The batch id comes from the task's local property
``streaming.sql.batchId`` (as PySpark's own ``foreach`` writer reads it).

What the trial gives up, and why it is not the default (BENCHMARKS.md has the numbers): the plan check
that one task holds one partition runs in ``commit``, after the tasks wrote (each task still refuses
rows of two partitions before it writes); the topic metadata check on a timer and the crash hook are
not wired; ``commit`` runs in a Python process the driver's JVM starts, so its report goes to the
driver's stderr, not through the job's own ``progress`` stream.
"""

from __future__ import annotations

import base64
import dataclasses
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pyspark import cloudpickle  # type: ignore[attr-defined]
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.partition_transactions import PartitionResult, SinkConfig
from spark_jobs.sink.transactional_sink import write_in_place

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql.types import StructType

SOURCE_NAME = "ikkai_transactional"
SINK_OPTION = "ikkai.sink"  # the sink's config and transform, pickled: a data source gets only string options
BATCH_ID_PROPERTY = "streaming.sql.batchId"

ArrowTransform = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]


def sink_option(config: SinkConfig, transform: ArrowTransform | None) -> dict[str, str]:
    """The option that carries ``config`` and ``transform`` to the data source (on the driver and every task)."""
    pickled = cloudpickle.dumps((config, transform))  # type: ignore[no-untyped-call]
    return {SINK_OPTION: base64.b64encode(pickled).decode("ascii")}


@dataclasses.dataclass(frozen=True)
class WrittenPartitions(WriterCommitMessage):
    """What one task wrote: a partition's result, or nothing for a task without rows."""

    results: tuple[PartitionResult, ...]


def batch_results(
    messages: list[WriterCommitMessage | None], commits_topic: str, batch_id: int
) -> list[PartitionResult]:
    """Every task's results, by partition; a partition written by two tasks is refused (a bug in the layout)."""
    results = sorted(
        (r for m in messages if isinstance(m, WrittenPartitions) for r in m.results), key=lambda r: r.partition
    )
    partitions = [r.partition for r in results]
    twice = sorted({p for p in partitions if partitions.count(p) > 1})
    if twice:
        raise CommitMarkerError(
            commits_topic,
            f"batch {batch_id}: partitions {twice} were written by more than one Spark task",
            fix="read the input with one Spark task per Kafka partition (no minPartitions, no shuffle before the sink)",
        )
    return results


class TransactionalStreamWriter(DataSourceStreamArrowWriter):
    """``write`` per task: ``write_in_place``; ``commit`` per batch: the layout check and one report line."""

    def __init__(self, config: SinkConfig, transform: ArrowTransform | None) -> None:
        self.config = config
        self.transform = transform

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if batch is None:
            raise CommitMarkerError(self.config.commits_topic, "a write task without a batch id", fix="report this bug")
        written = write_in_place(iterator, self.config, int(batch), self.transform)
        return WrittenPartitions(tuple(PartitionResult(**row) for chunk in written for row in chunk.to_pylist()))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        results = batch_results(messages, self.config.commits_topic, batchId)
        written = sum(r.records for r in results)
        slowest = max((r.seconds for r in results), default=0.0)
        sys.stderr.write(
            f"{self.config.query}: batch {batchId} committed {written} records, slowest partition {slowest:.2f} s"
            " (data source writer)\n"
        )
        sys.stderr.flush()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # A task failed: the partitions that committed are recorded in their markers, and the batch's
        # re-run skips them; an open transaction is ended by the next init_transactions of its id.
        pass


class TransactionalDataSource(DataSource):
    """The data source Spark instantiates from ``SINK_OPTION``: a stream writer and nothing to read."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> TransactionalStreamWriter:
        config, transform = cloudpickle.loads(base64.b64decode(self.options[SINK_OPTION]))
        return TransactionalStreamWriter(config, transform)

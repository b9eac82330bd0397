"""The exactly-once sink as a Python Data Source streaming writer: the default for jobs written in place.

``writeStream.format("ikkai_transactional")`` in place of ``foreachBatch``: Spark runs the sink's
``write`` once per task of the micro-batch's one stage (Arrow batches in, a commit message out) and
``commit`` once per batch on the driver (``DataSourceStreamArrowWriter``, PySpark 4.1+). A job whose
rows are written in place with the sink's ``RowTransform`` (infer: the model runs in the write task)
uses it unless ``--sink-api foreach-batch`` asks for the older path (the benchmarks compare both).

Each task does exactly what the ``foreachBatch`` path's fused ``mapInArrow`` does (``write_in_place``:
decide the task's rows, then one Kafka transaction with its commit marker), so the exactly-once
protocol is the same and the markers are the same records. What changes is around it: no Python
callback into the driver per batch, no DataFrame built, analysed and collected per batch (BENCHMARKS.md:
1.7-1.9x the throughput). The batch id comes from the task's local property ``streaming.sql.batchId``
(as PySpark's own ``foreach`` writer reads it). The checks keep their place:

- **one task per partition, before any write**: the query's plan is checked once, before it starts
  (``shared_partitions.refuse_a_split_stream``: only row-preserving operators over one subscription
  of one Kafka topic, read without ``minPartitions``/``maxRecordsPerPartition``), so every micro-batch
  has one task per input partition; each task refuses rows of two partitions before it writes, and ``commit``
  refuses a partition two tasks wrote (a bug: it cannot happen after the first check).
- **an ``IkkaiError`` stays itself**: a task that refuses returns the error in its commit message
  instead of raising it (Spark would turn it into a page of traceback); ``commit`` writes it to
  ``refusal_file`` (the driver's machine: ``commit`` runs in a Python process the driver's JVM
  starts) and raises it, failing the batch before Spark's commit log records it; the driver reads
  the file and raises the error, so the job prints its one line (``streaming_job.RunningQuery``).
  A task's refusal is not retried by Spark: refusals are about the data or the layout, which a retry
  does not change. Kafka's own answers (``TransactionError``: unreachable past the deadline, a
  fenced producer) and any other exception (a Python worker that dies) are Spark's task failures as
  before, retried up to ``spark.task.maxFailures``.
- **topic metadata**: read at start and after a failed batch (the driver explains the failure when
  the topics do, ``TransactionalBatchWriter.explain``); a grown input is refused by the tasks at once.
  Unlike ``foreachBatch`` there is no check on a timer between batches: nothing of the driver runs
  between them.
- **the tests' crash hook** (``--crash-after-batch N``): ``commit`` of batch N SIGKILLs the driver's
  JVM and Python process, after the batch's transactions and before Spark's commit log, as the
  ``foreachBatch`` hook does.
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from ikkai.errors import IkkaiError
from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.kafka_errors import TransactionError
from spark_jobs.sink.partition_transactions import PartitionResult
from spark_jobs.sink.transactional_sink import TransactionalBatchWriter, batch_report
from spark_jobs.sink.write_tasks import RowTransform, write_in_place

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter
    from pyspark.sql.types import StructType

SOURCE_NAME = "ikkai_transactional"
SINK_OPTION = "ikkai.sink"  # the sink's StreamSink, pickled: a data source gets only string options
BATCH_ID_PROPERTY = "streaming.sql.batchId"
# The logical operators that keep every row in the Spark task that read it (no shuffle, no union, no coalesce).

ArrowTransform = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]


@dataclasses.dataclass(frozen=True)
class StreamSink:
    """What the data source needs on the driver and in every task, pickled into ``SINK_OPTION``."""

    config: SinkConfig
    transform: ArrowTransform | None
    refusal_file: str  # on the driver's machine: where commit() leaves a task's IkkaiError for the driver
    crash_after_batch: int | None = None  # the tests' fault injection (see the module docstring)
    crash_pids: tuple[int, ...] = ()  # the driver's JVM and Python process, killed in that order

    def option(self) -> dict[str, str]:
        """The option that carries this sink to the data source."""
        pickled = cloudpickle.dumps(self)  # type: ignore[no-untyped-call]
        return {SINK_OPTION: base64.b64encode(pickled).decode("ascii")}


@dataclasses.dataclass(frozen=True)
class WrittenPartitions(WriterCommitMessage):
    """What one task wrote: a partition's result, nothing for a task without rows, or the error that refused it."""

    results: tuple[PartitionResult, ...]
    refusal: IkkaiError | None = None
    started: float = 0.0  # time.time() when the task began: the batch's line counts from its first task


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


def read_refusal(refusal_file: str | Path) -> IkkaiError | None:
    """The IkkaiError a batch's ``commit`` left for the driver, if any."""
    try:
        refusal = pickle.loads(Path(refusal_file).read_bytes())  # noqa: S301 - written by this job's commit()
    except FileNotFoundError:
        return None
    return refusal if isinstance(refusal, IkkaiError) else None


class TransactionalStreamWriter(DataSourceStreamArrowWriter):
    """``write`` per task: ``write_in_place``; ``commit`` per batch: refusals, the layout check, one report line."""

    def __init__(self, sink: StreamSink) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        started = time.time()  # wall clock across processes: the driver's commit compares it
        config = self.sink.config
        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if batch is None:
            raise CommitMarkerError(config.commits_topic, "a write task without a batch id", fix="report this bug")
        try:
            written = list(write_in_place(iterator, config, int(batch), self.sink.transform))
        except TransactionError:  # Kafka's answer (unreachable, fenced): Spark's task failure, retried as before
            raise
        except IkkaiError as refusal:  # itself, to the driver (module docstring); nothing of it was committed
            return WrittenPartitions((), refusal, started)
        results = tuple(PartitionResult(**row) for chunk in written for row in chunk.to_pylist())
        return WrittenPartitions(results, None, started)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sink = self.sink
        refusals = [m.refusal for m in messages if isinstance(m, WrittenPartitions) and m.refusal is not None]
        if refusals:
            leave_for_driver(sink.refusal_file, refusals[0])
            raise refusals[0]
        results = batch_results(messages, sink.config.commits_topic, batchId)
        began = min((m.started for m in messages if isinstance(m, WrittenPartitions)), default=time.time())
        report = batch_report(sink.config.query, batchId, results, time.time() - began)
        if sink.crash_after_batch is not None and batchId >= sink.crash_after_batch:
            crash(report + f"{sink.config.query}: fault injection: SIGKILL after batch {batchId}\n", sink.crash_pids)
        sys.stderr.write(report)
        sys.stderr.flush()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # A task failed: the partitions that committed are recorded in their markers, and the batch's
        # re-run skips them; an open transaction is ended by the next init_transactions of its id.
        pass


def crash(last_words: str, pids: tuple[int, ...]) -> None:
    """The tests' fault injection: ``last_words`` on the driver's stderr, then SIGKILL to each of ``pids`` in order.

    This process's stderr reaches the job's through the driver's JVM, which dies first: the words go
    straight to the driver's Python process's stderr (Linux: /proc/<pid>/fd/2), the last of ``pids``.
    """
    with open(f"/proc/{pids[-1]}/fd/2", "w") as stderr:
        stderr.write(last_words)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def leave_for_driver(refusal_file: str, refusal: IkkaiError) -> None:
    """Write ``refusal`` where the driver reads it (atomically: the driver may look at any moment)."""
    path = Path(refusal_file)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(pickle.dumps(refusal))
    partial.replace(path)


class TransactionalDataSource(DataSource):
    """The data source Spark instantiates from ``SINK_OPTION``: a stream writer and nothing to read."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> TransactionalStreamWriter:
        sink: Any = cloudpickle.loads(base64.b64decode(self.options[SINK_OPTION]))
        return TransactionalStreamWriter(sink)


def attach_data_source(
    spark: SparkSession,
    stream: DataStreamWriter,
    writer: TransactionalBatchWriter,
    transform: RowTransform,
    crash_after_batch: int | None = None,
) -> tuple[DataStreamWriter, Callable[[], IkkaiError | None]]:
    """The prepared writer's sink as a Python data source's stream writer, and where a batch's refusal is read.

    The plan was checked by the writer's start, before anything was written (one task per Kafka partition:
    ``query_start.SinkStart.rows``, ``TransactionalBatchWriter.check_stream``); a refusal travels from a task
    through the driver-side commit to a file in a folder of this process's own (0700).
    """
    folder = tempfile.mkdtemp(prefix=f"ikkai-{writer.config.query}-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # after the driver read it, when the job ends
    refusal_file = Path(folder) / "refusal"
    crash_pids: tuple[int, ...] = ()
    if crash_after_batch is not None:  # the driver's JVM first (it would go on to Spark's commit log)
        crash_pids = (int(spark._jvm.java.lang.ProcessHandle.current().pid()), os.getpid())  # type: ignore[union-attr]
    sink = StreamSink(writer.config, transform.function, str(refusal_file), crash_after_batch, crash_pids)
    spark.dataSource.register(TransactionalDataSource)
    return stream.format(TransactionalDataSource.name()).options(**sink.option()), lambda: read_refusal(refusal_file)

"""What the transactional sink's Spark tasks run (``mapInArrow`` functions), and how their results come back.

A write task holds every row of one Kafka partition of the batch: routed (``write_batches``, after
``route_batches``, Spark's repartition and sort) or in place (``write_in_place``, in the stage that
computed them, with the ``RowTransform`` that computes them). It turns the rows into the sink's
records, as one Arrow table (``record_table``), and writes them as one partition's transactions:
through the executor's writer, to which the table goes as Arrow (``executor_writer_client``), or
with its Python worker's producers, record by record (``partition_transactions.write_partition``),
as ``SinkConfig.transactional_writer`` says. Each task yields one row, its ``PartitionResult``
(``RESULT_SCHEMA``), which the driver gathers (``collect_results``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ikkai.contract.partitioning import kafka_partitions
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.executor_writer_client import write_through_executor
from spark_jobs.sink.partition_transactions import PartitionResult, write_partition
from spark_jobs.sink.record_table import record_table, table_records

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

BATCH_ID_PROPERTY = "ikkai.sink.batchId"  # the Spark job's local property naming the batch its write tasks write
SPARK_BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's own, on the query's thread (MicroBatchExecution)
HEADERS_COLUMN = "headers"  # optional: map<string,string>, written as Kafka record headers (UTF-8 values)
ROUTE_COLUMN = "_ikkai_route"
ArrowBatches = Iterator["pa.RecordBatch"]  # what a mapInArrow function takes and yields


@dataclass(frozen=True)
class RowTransform:
    """What turns a batch's rows into the sink's output rows, per Spark task, over Arrow batches.

    ``function`` is a ``mapInArrow`` function (it pickles: a module function or a
    ``functools.partial``); ``schema`` is Spark's DDL of the rows it yields, which must hold the
    sink's columns (``OUTPUT_COLUMNS``, the ``order_by``, source and partition columns).
    """

    function: Callable[[ArrowBatches], ArrowBatches]
    schema: str

    def apply(self, rows: DataFrame) -> DataFrame:
        """The output rows as a DataFrame of their own: an extra ``mapInArrow`` (routed, at-least-once)."""
        return rows.mapInArrow(self.function, self.schema)


def with_route_column(schema: StructType) -> StructType:
    from pyspark.sql.types import IntegerType, StructField, StructType

    return StructType([*schema.fields, StructField(ROUTE_COLUMN, IntegerType(), nullable=False)])


def _keys(chunk: pa.RecordBatch | pa.Table) -> list[bytes]:
    keys: list[bytes] = chunk.column("key").to_pylist()
    if any(key is None for key in keys):
        raise ConfigError("sink", "key", "a row has no key", fix="every output record needs a key to route it")
    return keys


def route_batches(batches: Iterator[pa.RecordBatch], routes: tuple[int, ...]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: append each row's route, the value that sends it to Spark partition = its Kafka partition."""
    import pyarrow as pa

    table = pa.array(routes, type=pa.int32())
    for chunk in batches:
        partitions = kafka_partitions(_keys(chunk), len(routes))
        yield chunk.append_column(ROUTE_COLUMN, table.take(pa.array(partitions)))


def _write_partition(config: SinkConfig, batch_id: int, partition: int, rows: pa.Table) -> PartitionResult:
    """``rows`` (the sink's columns, in their final order) written as partition ``partition``'s transactions: by the
    executor's writer, handed over as Arrow (``record_table``), or with this worker's producers
    (``transactional_writer``)."""
    table = record_table(rows, HEADERS_COLUMN, config.source_columns)
    if config.transactional_writer == "executor":
        return write_through_executor(config, batch_id, partition, table)
    return write_partition(config, batch_id, partition, table_records(table))


def write_batches(
    batches: Iterator[pa.RecordBatch], config: SinkConfig, batch_id: int, routes: tuple[int, ...]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` after the repartition and sort: Spark partition p, written as one transaction."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else -1
    chunks = [chunk for chunk in batches if len(chunk)]
    if not 0 <= partition < config.partitions or any(
        not pc.all(pc.equal(chunk.column(ROUTE_COLUMN), routes[partition])).as_py() for chunk in chunks
    ):
        raise CommitMarkerError(config.commits_topic, "Spark changed the partition layout", fix="report this bug")
    if not chunks:  # nothing to vouch for: no producer, no transaction
        yield _result_batch(PartitionResult(partition, batch_id, 0, skipped=False))
        return
    yield _result_batch(_write_partition(config, batch_id, partition, pa.Table.from_batches(chunks)))


def write_in_place(
    batches: ArrowBatches,
    config: SinkConfig,
    batch_id: int | None,
    transform: Callable[[ArrowBatches], ArrowBatches] | None = None,
) -> ArrowBatches:
    """``mapInArrow`` in the stage that computed the rows: all of them name one partition, one transaction.

    With ``transform``, the task's rows are its input and the output rows are what ``transform``
    yields for them, computed here, in the same Python worker, before the transaction begins.
    A task without rows writes nothing (a re-run of the batch has none either). ``batch_id`` None:
    the batch the driver named for this Spark job (``InPlaceWrite``, ``task_batch_id``).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = [chunk for chunk in (batches if transform is None else transform(batches)) if len(chunk)]
    if not chunks:
        return
    if batch_id is None:
        batch_id = task_batch_id(config)
    column = config.partition_column
    assert column is not None
    table = pa.Table.from_batches(chunks)
    named = pc.unique(table.column(column)).to_pylist()
    if len(named) != 1 or named[0] is None or not 0 <= named[0] < config.partitions:
        raise CommitMarkerError(
            config.commits_topic,
            f"batch {batch_id}: one Spark task holds rows of {column} {named}, not one of 0..{config.partitions - 1}",
            fix=f"partition the batch by {column} (one Kafka topic, no minPartitions, no shuffle before the sink) "
            "or write it routed (no partition_column)",
        )
    partition = int(named[0])
    table = table.sort_by([(name, "ascending") for name in config.order_by])
    outside = int((kafka_partitions(_keys(table), config.partitions) != partition).sum())
    result = _write_partition(config, batch_id, partition, table)
    yield _result_batch(dataclasses.replace(result, outside_key_partition=outside))


# PartitionResult's fields as the write tasks return them, with Spark's type of each: the one
# place both the Spark schema and the Arrow schema of a task's result come from.
_RESULT_TYPES = {"partition": "int", "batch_id": "long", "records": "long", "skipped": "boolean",
                 "outside_key_partition": "long", "already_committed": "long", "new_producer": "boolean",
                 "seconds": "double"}  # fmt: skip
assert tuple(_RESULT_TYPES) == tuple(f.name for f in dataclasses.fields(PartitionResult)), "PartitionResult changed"
RESULT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _RESULT_TYPES.items())


def collect_results(
    rows: DataFrame, write: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
) -> list[PartitionResult]:
    """Run the write tasks (``mapInArrow``) and gather what each partition did, by partition."""
    results = (PartitionResult(**row.asDict()) for row in rows.mapInArrow(write, RESULT_SCHEMA).collect())
    return sorted(results, key=lambda r: r.partition)


def task_batch_id(config: SinkConfig) -> int:
    """In a write task: the batch the driver named for its Spark job (``BATCH_ID_PROPERTY``), and Spark's own if set.

    Spark names a micro-batch's jobs in the local property ``streaming.sql.batchId`` of the query's
    thread, which runs ``foreachBatch``'s function; the two must agree, and a job without the driver's
    name is refused before anything is written (a stale or missing id would mislabel the markers).
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    named = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    spark_named = context.getLocalProperty(SPARK_BATCH_ID_PROPERTY) if context is not None else None
    if named is None or (spark_named is not None and spark_named != named):
        raise CommitMarkerError(
            config.commits_topic, f"a write task of query {config.query} was named batch {named} by the sink and "
            f"{spark_named} by Spark; nothing was written", fix="report this bug",
        )  # fmt: skip
    return int(named)


class InPlaceWrite:
    """The in-place write tasks of one writer's batches: one ``mapInArrow`` function, pickled once, not per batch.

    Building a ``mapInArrow`` per batch pickles its function (the sink's config, the job's
    transform) and resolves each column through py4j. Here the function is built once per
    ``(config, transform, columns)``: the batch id reaches the tasks as a local property of the
    Spark job (``task_batch_id``), set for the job and cleared after it.
    """

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._kept: tuple[object, ...] = ()  # what the key's ids name, alive while they are the key
        self._column: Any = None

    def collect(
        self,
        rows: DataFrame,
        config: SinkConfig,
        batch_id: int,
        transform: Callable[[ArrowBatches], ArrowBatches] | None,
    ) -> list[PartitionResult]:
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.functions import pandas_udf
        from pyspark.util import PythonEvalType

        columns = tuple(rows.columns)
        key = (id(config), id(transform), columns)  # the config is replaced, never changed: a new one is a new key
        if key != self._key:
            write = functools.partial(write_in_place, config=config, batch_id=None, transform=transform)
            udf = pandas_udf(write, RESULT_SCHEMA, PythonEvalType.SQL_MAP_ARROW_ITER_UDF)  # type: ignore[call-overload]
            self._column, self._key = udf(*[F.col(f"`{name}`") for name in columns]), key
            self._kept = (config, transform)
        context = rows.sparkSession.sparkContext
        context.setLocalProperty(BATCH_ID_PROPERTY, str(batch_id))
        try:
            written = DataFrame(rows._jdf.mapInArrow(self._column._jc, False, None), rows.sparkSession).collect()
        finally:
            context.setLocalProperty(BATCH_ID_PROPERTY, None)  # type: ignore[arg-type]
        return sorted((PartitionResult(**row.asDict()) for row in written), key=lambda r: r.partition)


def _result_batch(result: PartitionResult) -> Any:
    import pyarrow as pa

    arrow = {"int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_(), "double": pa.float64()}
    schema = pa.schema([(name, arrow[kind]) for name, kind in _RESULT_TYPES.items()])
    return pa.RecordBatch.from_pylist([dataclasses.asdict(result)], schema=schema)

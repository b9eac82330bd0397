"""Before an in-place write: no two Spark tasks of the batch may hold rows of one Kafka partition.

Two such tasks would each commit part of the partition's rows under one marker. A streaming query's
plan is checked once, when it starts (``refuse_a_split_stream``: it cannot change while the query
runs); a batch whose stream was not checked so is checked before its write: from its physical plan
when it is a plain Kafka read (no task runs), else by asking the tasks which partition their rows
name (``refuse_shared_partitions``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_jobs.sink.commit_markers import CommitMarkerError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.write_tasks import RowTransform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROW_PRESERVING = frozenset({"Project", "Filter", "SubqueryAlias", "MapInArrow", "PythonMapInArrow", "MapInPandas"})
SPLITTING_OPTIONS = ("minpartitions", "maxrecordsperpartition")  # Kafka source options that split a partition


def refuse_a_split_stream(rows: DataFrame, config: SinkConfig) -> None:
    """Refuse a streaming plan whose micro-batches could give one Kafka partition to two Spark tasks, before it runs.

    The plan is fixed when the query starts; with only row-preserving operators over one Kafka
    topic read without options that split a partition, each micro-batch runs one task per input
    partition, so a partition has one writer. Anything else (a shuffle, a union, a pattern
    subscription, ``minPartitions``) is refused here, before any task writes.
    """
    node = rows._jdf.queryExecution().analyzed()
    operators = []
    while node.children().size() == 1:
        operators.append(str(node.nodeName()))
        node = node.children().apply(0)
    problem = None
    unknown = [name for name in operators if name not in ROW_PRESERVING]
    if unknown:
        problem = f"the stream passes {unknown[0]}, which may move rows between Spark tasks"
    elif node.children().size() != 0 or str(node.nodeName()) != "StreamingRelationV2":
        problem = f"the stream reads {node.nodeName()}, not one Kafka source"
    else:
        options = {str(k).lower(): str(v) for k, v in dict(node.extraOptions().asCaseSensitiveMap()).items()}
        split = [o for o in SPLITTING_OPTIONS if o in options]
        if str(node.sourceName()) != "kafka" or "subscribe" not in options or "," in options["subscribe"]:
            problem = "the stream does not subscribe to exactly one Kafka topic"
        elif split:
            problem = f"the Kafka source is read with {split[0]}, which splits a partition between Spark tasks"
    if problem is not None:
        raise CommitMarkerError(
            config.commits_topic, f"query {config.query}: {problem}; nothing was written",
            fix="read one Kafka topic with one Spark task per partition and no shuffle before the sink, or write "
            "it routed (no partition_column)",
        )  # fmt: skip


def refuse_shared_partitions(
    rows: DataFrame, batch_id: int, config: SinkConfig, transform: RowTransform | None
) -> None:
    """Refuse an in-place batch in which two Spark tasks would hold rows of one Kafka partition, before any writes.

    Two such tasks would each commit part of the partition's rows under one marker: whichever
    commits second overwrites the first's offsets, and records are lost or written twice. So the
    check runs before the write tasks: from the physical plan alone when it is a plain Kafka read
    (``planned_kafka_partitions``, no task runs), else by a Spark job that reads which partition
    each task's rows name (with a transform, of the rows it yields).
    """
    from pyspark.sql import functions as F

    column = config.partition_column
    assert column is not None
    held = planned_kafka_partitions(rows)
    if held is None:  # a Spark job of its own; with a transform, the Kafka source's partition column if there is one
        named = "partition" if transform is not None and "partition" in rows.columns else column
        output = rows if transform is None or named == "partition" else transform.apply(rows)
        held = {}
        for row in output.select(F.spark_partition_id().alias("_task"), named).distinct().collect():
            held.setdefault(int(row["_task"]), set()).add(row[named])
    tasks_of: dict[object, int] = {}
    for partitions in held.values():
        for partition in partitions:
            tasks_of[partition] = tasks_of.get(partition, 0) + 1
    shared = sorted(p for p, tasks in tasks_of.items() if tasks > 1)  # type: ignore[type-var]
    if shared:
        raise CommitMarkerError(
            config.commits_topic,
            f"batch {batch_id}: partitions {shared} would be written by more than one Spark task; nothing was written",
            fix=f"the batch is not partitioned by {column}: a source read with minPartitions or "
            "maxRecordsPerPartition, or a shuffle before the sink; write it routed (no partition_column)",
        )


def planned_kafka_partitions(rows: DataFrame) -> dict[int, set[int]] | None:
    """Per Spark partition of ``rows``, the Kafka partition it reads, from the physical plan (no task runs).

    Only for a chain of one-child operators that keep every row in its partition (no Exchange, no
    Coalesce) above one scan of one Kafka topic: then Spark partition i holds the rows of the
    scan's input partition i, one offset range of one Kafka partition. The scan is Spark's Kafka
    scan itself, or (what ``foreachBatch`` hands its function) an existing RDD whose one-to-one
    lineage ends in it. Anything else: None.
    """
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    try:
        node = rows._jdf.queryExecution().executedPlan()
        while node.children().size() == 1:
            if any(word in str(node.nodeName()) for word in ("Exchange", "Coalesce", "ShuffleRead", "Union")):
                return None
            node = node.children().apply(0)
        if node.children().size() != 0:
            return None
        if "ExistingRDD" in str(node.nodeName()):  # foreachBatch's batch: the micro-batch's RDD, planned
            parts = _source_rdd_partitions(node.rdd())
            if parts is None:
                return None
            inputs = [_planned_inputs(part) for part in parts]
        else:  # a DataSource V2 scan (batch or micro-batch); other scans have no inputPartitions
            scan = node.inputPartitions()
            inputs = [_seq(scan.apply(i)) for i in range(scan.size())]
        planned: dict[int, set[int]] = {}
        topics = set()
        for index, grouped in enumerate(inputs):
            planned[index] = set()
            for position in range(grouped.size()):
                topic_partition = grouped.apply(position).offsetRange().topicPartition()  # Kafka's only
                topics.add(str(topic_partition.topic()))
                planned[index].add(int(topic_partition.partition()))
    except (Py4JError, AttributeError, TypeError):  # not the plan this reads: the caller asks the tasks instead
        return None
    return planned if len(topics) <= 1 else None  # an empty batch plans no input partition


def _planned_inputs(part: Any) -> Any:
    """What one partition of the micro-batch's RDD reads, as a sequence (py4j: ``apply``/``size``).

    Spark 4.3's ``DataSourceRDDPartition`` holds one ``inputPartition`` (an ``Option``: empty for a
    partition with nothing to read); Spark 3.x held a ``Seq`` named ``inputPartitions``. Reading
    only the old name made every foreachBatch check fall back to a Spark job of its own per batch.
    """
    from py4j.protocol import Py4JError

    try:
        planned = part.inputPartition()
    except Py4JError:
        return part.inputPartitions()
    return _seq(planned.get()) if planned.isDefined() else _seq(None, size=0)


def _seq(item: Any, size: int = 1) -> Any:
    """One input partition as a one-element sequence (py4j: ``apply``/``size``), like a grouped RDD partition's."""

    class One:
        def size(self) -> int:
            return size

        def apply(self, _index: int) -> Any:
            return item

    return One()


def _source_rdd_partitions(rdd: Any) -> list[Any] | None:
    """The partitions of the DataSource V2 RDD at the end of ``rdd``'s one-to-one lineage, else None."""
    while rdd.getClass().getSimpleName() != "DataSourceRDD":
        dependencies = rdd.dependencies()
        if dependencies.size() != 1 or dependencies.apply(0).getClass().getSimpleName() != "OneToOneDependency":
            return None
        rdd = dependencies.apply(0).rdd()
    return list(rdd.partitions())

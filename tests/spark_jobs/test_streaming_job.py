"""The streaming-job template: a refusal inside a micro-batch reaches the operator as its one line, exit 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.sink.transactional_sink import (
    AtLeastOnceBatchWriter,
    RowTransform,
    SinkConfig,
    TransactionalBatchWriter,
)
from spark_jobs.streaming_job import (
    BatchPlan,
    ErrorKeepingBatch,
    RunningQuery,
    StreamingOptions,
    default_checkpoint_refusal,
    main_entry,
    sink_api,
)

REFUSAL = ConfigError("infer", "input partition 3", "outside the pinned layout of 2", fix="grow every topic")


def _started(spark: Any, tmp_path: Path, function: Any) -> RunningQuery:
    """A real streaming query over one text file whose one micro-batch runs ``function``."""
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "part.txt").write_text("one record\n")
    batch = ErrorKeepingBatch(function)
    query = (
        spark.readStream.text(str(tmp_path / "input"))
        .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
        .foreachBatch(batch)
        .trigger(availableNow=True)
        .start()
    )
    return RunningQuery(query, lambda: batch.error)


def _refuse(_batch: Any, _batch_id: int) -> None:
    raise REFUSAL


def test_an_ikkai_error_in_a_batch_is_raised_as_itself(spark: Any, tmp_path: Path) -> None:
    running = _started(spark, tmp_path, _refuse)
    with pytest.raises(ConfigError) as raised:
        running.await_termination()
    assert raised.value is REFUSAL


def test_any_other_error_in_a_batch_stays_sparks(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    def fail(_batch: Any, _batch_id: int) -> None:
        raise RuntimeError("a bug")

    running = _started(spark, tmp_path, fail)
    with pytest.raises(StreamingQueryException, match="a bug"):
        running.await_termination()


def test_the_job_prints_the_refusal_in_one_line_and_exits_1(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    @click.command()
    def job() -> None:
        _started(spark, tmp_path, _refuse).await_termination()

    with pytest.raises(SystemExit) as exited:
        main_entry(job, [])
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().splitlines() == [f"ikkai: error: {REFUSAL}"]


def test_the_batch_bound_defaults_from_the_transaction_timeout() -> None:
    options = StreamingOptions(KafkaContext("localhost:9092"), Path("cp"), "in", "q", transaction_timeout_ms=60_000)
    assert options.max_offsets == 25_000
    assert (
        StreamingOptions(KafkaContext("localhost:9092"), Path("cp"), "in", "q", max_offsets_per_trigger=7).max_offsets
        == 7
    )


@pytest.mark.parametrize(
    ("master", "given", "refused"),
    [
        ("local[2]", False, False),  # the default checkpoint is fine where driver and executors share a machine
        ("spark://10.0.0.1:7077", True, False),
        ("spark://10.0.0.1:7077", False, True),
        ("yarn", False, True),
        ("k8s://https://api:6443", False, True),
    ],
)
def test_the_default_checkpoint_is_refused_on_a_master_that_is_not_local(
    master: str, given: bool, refused: bool
) -> None:
    options = StreamingOptions(KafkaContext("b:9092"), Path("/home/me/.ikkai/checkpoints/infer"), "in", "infer",
                               checkpoint_given=given)  # fmt: skip
    refusal = default_checkpoint_refusal(master, options)
    assert (refusal is not None) == refused
    if refusal is not None:
        assert master in str(refusal) and "/home/me/.ikkai/checkpoints/infer" in str(refusal)
        assert refusal.fix is not None and "--checkpoint" in refusal.fix


def _passthrough(batches: Any) -> Any:
    return batches


@pytest.mark.parametrize(
    ("asked", "in_place", "mode", "attached"),
    [
        (None, True, "exactly-once", "foreach-batch"),  # infer: the default (measured: BENCHMARKS.md)
        (None, False, "exactly-once", "foreach-batch"),  # enrich: routed after its state
        (None, True, "at-least-once", "foreach-batch"),  # Spark's own sink, the baseline
        ("data-source", True, "exactly-once", "data-source"),  # asked for: the data source writer
    ],
)
def test_the_sink_is_attached_through_foreach_batch_unless_the_data_source_writer_is_asked_for(
    asked: str | None, in_place: bool, mode: str, attached: str
) -> None:
    cluster = KafkaContext("127.0.0.1:1")
    config = SinkConfig(app="ikkai", query="q", cluster=cluster, output_topics=("out",), partitions=2,
                        order_by=("offset",), source_topic="in")  # fmt: skip
    options = StreamingOptions(cluster=cluster, checkpoint=Path("c"), input_topic="in", query="q", sink_api=asked)
    plan = BatchPlan(output_topics=("out",), dlq_topic="dlq", order_by=("offset",), writer_version="v1",
                     rows=lambda rows: rows, transform=RowTransform(_passthrough, "key binary") if in_place else None,
                     partition_column="input_partition" if in_place else None)  # fmt: skip
    writer = TransactionalBatchWriter(config) if mode == "exactly-once" else AtLeastOnceBatchWriter(cluster)
    assert sink_api(options, plan, writer) == attached


def test_a_data_source_writer_asked_for_a_job_it_does_not_serve_is_refused() -> None:
    cluster = KafkaContext("127.0.0.1:1")
    options = StreamingOptions(
        cluster=cluster, checkpoint=Path("c"), input_topic="in", query="q", sink_api="data-source"
    )
    plan = BatchPlan(output_topics=("out",), dlq_topic="dlq", order_by=("offset",), writer_version="v1",
                     rows=lambda rows: rows)  # fmt: skip
    with pytest.raises(ConfigError, match="--sink-api: data-source serves exactly-once jobs"):
        sink_api(options, plan, AtLeastOnceBatchWriter(cluster))

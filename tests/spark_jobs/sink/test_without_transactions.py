"""The benchmarks' baseline: the exactly-once writer with its producers' transactions off, named, never implied.

Pure: no broker (a producer of an address nobody answers). What it writes is checked end to end by the steady-state
benchmark's smoke run (its decisions reach a read_committed consumer).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaException

from ikkai.contract.kafka import KafkaContext
from spark_jobs.infer.job import InferOptions
from spark_jobs.infer.job import main as infer_main
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.producer_pool import OwnerFiles, ProducerPool, ProducerWithoutTransactions, producer_settings
from spark_jobs.streaming_job import StreamingOptions


def config(transactions: bool) -> SinkConfig:
    return SinkConfig(
        app="app", query="query", cluster=KafkaContext("127.0.0.1:9"), output_topics=("out",), partitions=1,
        order_by=("seq",), source_topic="in", transactions=transactions,
    )  # fmt: skip


def test_transactions_are_on_unless_the_benchmarks_flag_is_named() -> None:
    with infer_main.make_context("infer", []) as context:
        assert StreamingOptions.of(InferOptions(**context.params), KafkaContext("b:9"), "q").transactions
    with infer_main.make_context("infer", ["--benchmark-without-transactions"]) as context:
        assert not StreamingOptions.of(InferOptions(**context.params), KafkaContext("b:9"), "q").transactions
    assert SinkConfig.__dataclass_fields__["transactions"].default is True
    assert "--benchmark-without-transactions" not in CliRunner().invoke(infer_main, ["--help"]).output  # hidden


def test_without_transactions_is_refused_outside_the_exactly_once_writer() -> None:
    result = CliRunner().invoke(
        infer_main, ["--bootstrap", "127.0.0.1:9", "--mode", "at-least-once", "--benchmark-without-transactions"]
    )
    assert result.exit_code == 2
    assert "--benchmark-without-transactions" in result.output and "needs --mode exactly-once" in result.output


def test_the_pool_makes_a_producer_without_a_transactional_id_and_never_reuses_one_across_the_switch(
    tmp_path: Path,
) -> None:
    pool = ProducerPool(owners=OwnerFiles(tmp_path))
    off = config(transactions=False)
    kept = pool.fresh(off, off.transactional_id(0))  # no init_transactions: nobody answers at 127.0.0.1:9
    try:
        assert isinstance(kept.producer, ProducerWithoutTransactions)
        assert producer_settings(off) != producer_settings(config(transactions=True))
        assert pool.get(config(transactions=True), off.transactional_id(0)) is None  # not reused with transactions
    finally:
        pool.close_all()


def test_a_commit_without_transactions_fails_unless_every_record_was_delivered(tmp_path: Path) -> None:
    pool = ProducerPool(owners=OwnerFiles(tmp_path))
    off = config(transactions=False)
    producer = pool.fresh(off, off.transactional_id(0)).producer
    try:
        producer.begin_transaction()
        producer.produce("out", value=b"v", key=b"k", partition=0)
        with pytest.raises(KafkaException, match="not delivered"):
            producer.commit_transaction(0.5)  # nobody answers: the record is still queued, never a silent loss
        producer.abort_transaction(0.5)
        assert len(producer) == 0  # what was not sent is dropped
    finally:
        pool.close_all()

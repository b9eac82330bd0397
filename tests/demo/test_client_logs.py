"""librdkafka's lines during the demo go to the run folder's log file, not to the demo's output."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo import client_logs
from demo.topics import _consumer
from ikkai.contract.kafka import KafkaContext


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    root = logging.getLogger("ikkai")
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.propagate = True
    root.setLevel(logging.NOTSET)


def test_a_demo_readers_librdkafka_lines_go_to_the_run_log_not_stderr(
    run_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log = client_logs.kept_in(run_dir)
    consumer = _consumer(
        KafkaContext("127.0.0.1:9")
    )  # nothing listens: librdkafka complains that the connection is refused
    deadline = time.monotonic() + 30
    try:
        while "ikkai.demo.kafka" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "librdkafka logged nothing within 30 s"
            consumer.poll(0.5)  # serves librdkafka's log queue
    finally:
        consumer.close()
    out, err = capfd.readouterr()
    # Only this reader's own lines are judged: a client another test of the same process left behind may log.
    assert "127.0.0.1:9/" not in out + err and "127.0.0.1:9 " not in out + err, err[-2000:]
    assert "127.0.0.1:9" in log.read_text()


class _Refused(Exception):
    pass


def test_the_demos_master_data_producer_logs_to_the_run_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The transactional producer that publishes the demo's master data (a fresh broker answers its first
    InitProducerId with 'Not coordinator' for a while) takes the run log's logger, as every other client of the
    demo does: its GETPID warnings went to the demo's output. The config it is made with is checked (a fresh
    broker's coordinator load cannot be made to happen on purpose); the logger's own path is the test above."""
    from demo.payments_simulation import PaymentsWorld
    from demo.raw_payments import write_master_data

    made: list[dict[str, object]] = []

    class Recording:
        def __init__(self, config: dict[str, object]) -> None:
            made.append(config)

        def init_transactions(self, timeout: float) -> None:
            raise _Refused  # nothing further is needed: the producer was made

    monkeypatch.setattr("confluent_kafka.Producer", Recording)
    monkeypatch.setattr("spark_jobs.enrich.master_data.ensure_master_topics", lambda *a, **k: None)
    monkeypatch.setattr("demo.payments_simulation.generate_profiles", lambda world, seed: ([], []))
    with pytest.raises(_Refused):
        write_master_data(KafkaContext("127.0.0.1:9"), PaymentsWorld.__new__(PaymentsWorld), 7)
    assert [c.get("logger") for c in made] == [client_logs.KAFKA_LOG]

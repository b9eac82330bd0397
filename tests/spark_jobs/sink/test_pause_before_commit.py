"""The sink's test-only pause point (``commit_pause.pause_before_commit``): off unless its variable names a
folder; then the first write pauses with its records flushed, every later one runs straight through, and the paused
one goes on once released and says how its commit ended. No Kafka: a stand-in producer counts its flushes."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from spark_jobs.sink import commit_pause
from spark_jobs.sink.commit_pause import PAUSE_BEFORE_COMMIT, pause_before_commit

WAIT_S = 20.0


class FlushCounter:
    """What the pause point touches of a producer: flush."""

    def __init__(self) -> None:
        self.flushes = 0

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        return 0


def commit_in_thread(producer: FlushCounter, committed: list[int], batch: int) -> threading.Thread:
    def write() -> None:
        with pause_before_commit(producer, "q", 1, batch):  # type: ignore[arg-type]
            committed.append(batch)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def wait_for(path: Path) -> None:
    give_up_at = time.monotonic() + WAIT_S
    while not path.exists() and time.monotonic() < give_up_at:
        time.sleep(0.05)


@pytest.fixture
def pause_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(PAUSE_BEFORE_COMMIT, str(tmp_path))
    monkeypatch.setattr(commit_pause, "PAUSE_BOUND_S", 60.0)  # a broken pause point fails, never hangs
    return tmp_path


def test_unset_it_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PAUSE_BEFORE_COMMIT, raising=False)
    producer, committed = FlushCounter(), []
    with pause_before_commit(producer, "q", 0, 3):  # type: ignore[arg-type]
        committed.append(3)
    assert committed == [3]
    assert producer.flushes == 0
    assert list(tmp_path.iterdir()) == []


def test_the_first_write_pauses_flushed_until_released_and_later_ones_run_through(pause_folder: Path) -> None:
    first, committed = FlushCounter(), []
    paused = commit_in_thread(first, committed, batch=2)
    wait_for(pause_folder / "paused")
    assert json.loads((pause_folder / "paused").read_text()) == {
        "query": "q", "partition": 1, "batch": 2, "pid": os.getpid()
    }  # fmt: skip
    assert first.flushes == 1, "paused before its records reached the brokers"
    # The retry (any later write) is not held: it commits while the first one waits.
    retry = FlushCounter()
    through = commit_in_thread(retry, committed, batch=2)
    through.join(WAIT_S)
    assert not through.is_alive(), "a later write paused too"
    assert committed == [2]
    assert retry.flushes == 0
    assert paused.is_alive()
    assert not (pause_folder / "outcome").exists()
    (pause_folder / "release").touch()
    paused.join(WAIT_S)
    assert not paused.is_alive()
    assert committed == [2, 2]
    assert json.loads((pause_folder / "outcome").read_text()) == {"committed": True}


def test_a_failed_commit_after_the_pause_is_recorded_and_raised(pause_folder: Path) -> None:
    (pause_folder / "release").touch()
    with pytest.raises(RuntimeError, match="fenced"), pause_before_commit(FlushCounter(), "q", 0, 5):  # type: ignore[arg-type]
        raise RuntimeError("fenced")
    assert json.loads((pause_folder / "outcome").read_text()) == {"committed": False, "kind": "", "error": "fenced"}

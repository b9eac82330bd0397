"""Fault injection, for the cluster tests only: a transaction held open just before its commit.

With ``IKKAI_FAULT_PAUSE_BEFORE_COMMIT`` naming a folder, the first write to reach its commit holds its
transaction open there until released, so a test can build a zombie on purpose. Unset, it does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from spark_jobs.sink.kafka_errors import TransactionError

# Fault injection for tests, in the spirit of the jobs' --crash-after-batch: the folder a test watches. Executors of a
# cluster get it through spark.executorEnv.IKKAI_FAULT_PAUSE_BEFORE_COMMIT; nothing else ever sets it.
PAUSE_BEFORE_COMMIT = "IKKAI_FAULT_PAUSE_BEFORE_COMMIT"
PAUSE_BOUND_S = 300.0  # a paused write goes on by itself after this long, released or not


@contextlib.contextmanager
def pause_before_commit(producer: Producer, query: str, partition: int, batch_id: int) -> Iterator[None]:
    """Test-only: hold the first transaction that gets here open, its records on the brokers, until released.

    Off (one environment lookup) unless ``$IKKAI_FAULT_PAUSE_BEFORE_COMMIT`` names a folder. Then
    the first write to get here claims ``claimed`` in it (``O_EXCL``: every later write, the retry
    of this one included, runs straight through), flushes its records, writes ``paused`` (JSON:
    query, partition, batch, pid) and waits until ``release`` exists, ``PAUSE_BOUND_S`` at most,
    before it commits. ``outcome`` then says how that commit ended: committed, or the error.
    """
    folder = os.environ.get(PAUSE_BEFORE_COMMIT)
    if not folder:
        yield
        return
    here = Path(folder)
    try:
        os.close(os.open(here / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:  # another write paused already: this one is not the fault
        yield
        return
    producer.flush(PAUSE_BOUND_S)  # the transaction is open on the brokers, not only in this process
    _write_json(here / "paused", {"query": query, "partition": partition, "batch": batch_id, "pid": os.getpid()})
    give_up_at = time.monotonic() + PAUSE_BOUND_S
    while not (here / "release").exists() and time.monotonic() < give_up_at:
        time.sleep(0.1)
    try:
        yield
    except BaseException as exc:
        kind = exc.kind.value if isinstance(exc, TransactionError) else ""
        _write_json(here / "outcome", {"committed": False, "kind": kind, "error": str(exc)})
        raise
    _write_json(here / "outcome", {"committed": True})


def _write_json(path: Path, content: Mapping[str, Any]) -> None:
    """``content`` as ``path``, whole or not at all: a watcher never reads half of it."""
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.write_text(json.dumps(content))
    os.replace(staged, path)

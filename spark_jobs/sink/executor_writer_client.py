"""How a sink task reaches its executor's writer (``executor_writer``), starting it if nobody answers.

``write_through_executor`` is ``write_partition`` for ``--transactional-writer executor``: the task
sends its partition's records to the one writer process of its executor and returns its answer.

- Where: a Unix socket named after the executor (its JVM's pid, the nearest ``java`` ancestor of
  the Python worker through pyspark's daemon, and when that process started: a pid is reused) and
  the application, in ``ikkai-executor-writers-<uid>`` under the temporary folder, created 0700
  and refused unless only this user can write it (``ikkai.private_folders``, rule 11); the socket is 0600.
- Starting: the first task that finds nobody answering takes the folder's start lock (``flock``),
  looks again, and starts the writer in a session of its own (a killed task does not take it
  along); a task that lost the race waits for the lock and then connects.
- Every answer has a deadline that covers all of it (rule 10): what its transactions may take,
  twice (the request may first wait for its partition's lock, held by an earlier attempt's request
  that has the same bound). A writer that misses it is killed (SIGKILL: a stopped writer cannot
  hold anything back) and the task fails; its retry starts a successor, whose ``init_transactions``
  fences the killed writer's producer and aborts its open transaction. A writer that hangs up
  without answering (it was killed) fails the task the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ikkai.errors import IkkaiError
from ikkai.private_folders import private_temp_folder
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.executor_writer import (
    READY,
    FramingError,
    peer_credentials,
    proc_stat_field,
    read_frame,
    send_bytes,
    send_frame,
    started_at,
)
from spark_jobs.sink.partition_transactions import PartitionResult, combined_result
from spark_jobs.sink.record import Record
from spark_jobs.sink.record_table import fits, ipc_frames, table_of, table_records, table_sizes
from spark_jobs.sink.size_bounds import frame_bytes, set_aside_too_large, transaction_starts

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

START_DEADLINE_S = 30.0  # a new writer imports the sink and listens within this
CONNECT_DEADLINE_S = 10.0
MAX_ANSWER_BYTES = 1024 * 1024  # a PartitionResult or an error


class ExecutorWriterError(IkkaiError):
    """The executor writer did not answer a task: it was killed, or it stalled and was killed for it."""

    def __init__(self, socket_path: Path, writer_pid: int, problem: str) -> None:
        super().__init__(
            f"executor writer pid {writer_pid} at {socket_path}: {problem}",
            fix="Spark retries the task and a new writer fences this one's transactions; if every retry fails so, "
            "the writer's error is on the executor's stderr (lines 'ikkai executor writer: ...')",
        )
        self.socket_path = socket_path
        self.writer_pid = writer_pid


def executor_pid() -> int:
    """The pid of this Python worker's executor JVM: its nearest ``java`` ancestor, else its parent.

    Read from ``/proc`` (``executor_writer.proc_stat_field``), not through psutil: the executors' Python
    environment (``ikkai[jobs]``) does not carry it, and the writer is Linux-only (a Unix socket, ``/proc``)."""
    pid = os.getppid()
    for _ in range(4):
        try:
            if Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("java"):
                return pid
            pid = proc_stat_field(pid, 4)  # the parent's pid
        except (OSError, ValueError, IndexError):
            break
    return os.getppid()


def writers_folder() -> Path:
    """The folder of this user's writer sockets: 0700 and ours, or refused."""
    return private_temp_folder(
        "ikkai-executor-writers", "executor writers", "its sockets let a process write as the job",
    )  # fmt: skip


def socket_path(app: str, executor: int | None = None) -> Path:
    """The writer socket of ``executor`` (default: this worker's) for application ``app``."""
    digest = hashlib.sha256(app.encode()).hexdigest()[:12]
    pid = executor or executor_pid()
    return writers_folder() / f"{pid}.{started_at(pid)}-{digest}.sock"


def answer_deadline_s(config: SinkConfig, size: int) -> float:
    """How long a request of ``size`` bytes (``record_bytes``) may take: its transactions' bound, twice (an earlier
    attempt may hold the lock first).

    One more transaction than its bytes need: a record the broker refuses as too large makes the writer
    abort and write the transaction again with it set aside (``partition_transactions.write_partition``).
    """
    transactions = 2 + size // config.max_transaction_bytes
    return 2 * (transactions * config.transaction_timeout_ms / 1000 + config.retry_deadline_s)


def write_through_executor(
    config: SinkConfig,
    batch_id: int,
    partition: int,
    records: Sequence[Record] | pa.Table,
    executor: int | None = None,
) -> PartitionResult:
    """``write_partition`` done by the executor's writer; raises what it raised, or ``ExecutorWriterError``.

    ``records``: tuples, or their table (``record_table``: what a write task has). The batch travels
    bounded and as Arrow, never pickled record by record: records too large for their topics are dead
    letters first, then one request per transaction (``transaction_starts``), each in Arrow IPC frames
    of at most ``frame_bytes`` (``ipc_frames``). Sizes, limits and cuts are computed on the columns.
    """
    import pyarrow as pa

    table = records if isinstance(records, pa.Table) else table_of(records)
    if not len(table):  # nothing to vouch for: no request, as write_partition writes nothing
        return PartitionResult(partition, batch_id, 0, skipped=False)
    sizes = table_sizes(table)
    if not fits(config, table, sizes):  # rare: a record's dead letter, made as the writer makes it, from the tuples
        table = table_of(set_aside_too_large(config, table_records(table), sizes=sizes.tolist()))
        sizes = table_sizes(table)
    origins = table.column("source_partition").to_numpy(), table.column("source_offset").to_numpy()
    starts = transaction_starts(*origins, sizes, config.max_transaction_bytes)
    results = [
        _request(config, batch_id, partition, table.slice(start, stop - start), sizes[start:stop], executor)
        for start, stop in zip(starts, [*starts[1:], len(table)], strict=True)
    ]
    return combined_result(partition, batch_id, results)


def _request(
    config: SinkConfig, batch_id: int, partition: int, table: pa.Table, sizes: np.ndarray, executor: int | None
) -> PartitionResult:
    path = socket_path(config.app, executor)
    conn, writer_pid, inode = _connect_or_start(path, executor or executor_pid())
    bound_s = answer_deadline_s(config, int(sizes.sum()))
    deadline = time.monotonic() + bound_s
    frames = ipc_frames(table, sizes, frame_bytes(config))
    with conn:
        try:
            try:
                send_frame(conn, (config, batch_id, partition, len(frames)), deadline)
                for frame in frames:
                    send_bytes(conn, memoryview(frame), deadline)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the writer refused the request before reading all of it: its answer says why
            kind, answer = read_frame(conn, MAX_ANSWER_BYTES, deadline)
        except TimeoutError:
            _kill(path, writer_pid, inode)
            raise ExecutorWriterError(
                path, writer_pid, f"no answer for batch {batch_id}, partition {partition} within {bound_s:.0f} s; "
                "killed it",
            ) from None  # fmt: skip
        except (OSError, FramingError) as exc:
            raise ExecutorWriterError(
                path, writer_pid, f"hung up before answering batch {batch_id}, partition {partition} ({exc})"
            ) from None
    if kind == "error":
        raise answer
    assert isinstance(answer, PartitionResult)
    return answer


def running_writer(path: Path) -> int | None:
    """The pid of the writer listening at ``path``, if one does."""
    try:
        conn, pid, _ = _connect(path)
    except OSError:
        return None
    conn.close()
    return pid


def _connect(path: Path) -> tuple[socket.socket, int, int]:
    inode = path.lstat().st_ino
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_DEADLINE_S)
        conn.connect(str(path))
        pid, uid = peer_credentials(conn)
        if uid != os.getuid():
            raise PermissionError(f"{path} is served by uid {uid}")
    except BaseException:
        conn.close()
        raise
    return conn, pid, inode


@contextlib.contextmanager
def _start_lock(path: Path) -> Iterator[None]:
    fd = os.open(path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held at most START_DEADLINE_S by the winner
        yield
    finally:
        os.close(fd)


def _connect_or_start(path: Path, executor: int) -> tuple[socket.socket, int, int]:
    with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
        return _connect(path)
    with _start_lock(path):
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return _connect(path)  # the race's winner started it
        _start(path, executor)
        return _connect(path)


def _start(path: Path, executor: int) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the job's zip too
    process = subprocess.Popen(  # our own module, by the running interpreter
        [sys.executable, "-m", "spark_jobs.sink.executor_writer", "--socket", str(path), "--executor-pid",
         str(executor), "--executor-started", str(started_at(executor))],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env, start_new_session=True, close_fds=True,
    )  # fmt: skip
    assert process.stdout is not None
    with process.stdout:
        ready, _, _ = select.select([process.stdout], [], [], START_DEADLINE_S)
        if not ready or process.stdout.readline() != READY:
            process.kill()
            raise ExecutorWriterError(path, process.pid, f"did not start listening within {START_DEADLINE_S:.0f} s")


def _kill(path: Path, writer_pid: int, inode: int) -> None:
    """SIGKILL the writer that missed its deadline, and take its socket away so the next task starts another."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(writer_pid, signal.SIGKILL)
    with _start_lock(path), contextlib.suppress(FileNotFoundError):
        if path.lstat().st_ino == inode:
            path.unlink()

"""The executor writer: one process per Spark executor that keeps the sink's producers between batches.

Spark hands partition p's write task to whichever Python worker of the executor is idle, so with
producers kept per worker (``producer_pool.process_pool``), p's producer is often in the other worker:
a new producer, an ``init_transactions`` that fences the other worker's, a marker read, every few
batches (BENCHMARKS.md, "New producers"). PySpark cannot pin a partition to a worker. This process
is what stays put instead: the sink's tasks (``executor_writer_client``, with ``--transactional-writer
executor``) hand it their partition's records over a Unix socket and it runs the one
``write_partition`` in-process, so markers, chunking, dead letters and retries stay one
implementation, and p's producer lives as long as the executor does.

- Requests for one ``transactional.id`` run one at a time (a lock per id): a task's retry waits
  until the request of its failed attempt has committed or aborted, and then leaves out what the
  marker the writer now knows covers. Requests for different partitions run in parallel threads.
- Its producers are in a ``ProducerPool`` of its own that closes none by itself (``max_producers=None``):
  the writer evicts them, oldest first beyond ``MAX_PRODUCERS``, only while no request holds them.
- It exits, aborting what is open, when its executor's JVM is gone or after ``IDLE_S`` without a
  request. A writer killed any other way (kill -9, the client's deadline) leaves its open
  transactions to its successor's ``init_transactions``, which fences it and aborts them.
- Only its user reaches it: the socket is 0600 in a 0700 folder (``executor_writer_client``), and
  a peer of another uid is hung up on before anything is read (``SO_PEERCRED``).

The framing is a length and its bytes (``read_bytes``/``send_bytes``): a request is a pickled header
frame (``read_frame``/``send_frame``: the ``SinkConfig`` Spark already pickles into every task, the
batch, the partition, how many frames follow) and its records as Arrow IPC frames of at most
``size_bounds.frame_bytes`` (one transaction's bound; ``record_table``), so no frame grows with the
batch and no record is pickled; the answers carry the sink's own errors, which pickle as their
class and fields, so the task fails with the same error as on the worker path.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import socket
import socketserver
import struct
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ikkai.errors import IkkaiError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.partition_transactions import PartitionResult, write_partition
from spark_jobs.sink.producer_pool import ProducerPool
from spark_jobs.sink.record import Record
from spark_jobs.sink.record_table import read_frames, table_records, table_sizes
from spark_jobs.sink.size_bounds import FRAME_SLACK_BYTES, frame_bytes

MAX_PRODUCERS = 256  # per executor: every (query, partition) it serves
IDLE_S = 600.0  # no request for this long: the writer exits (the next task starts another)
EXECUTOR_POLL_S = 1.0  # how often it looks whether its executor JVM is still there
REQUEST_DEADLINE_S = 60.0  # a client sends its whole request at once; a stalled one is hung up on
MAX_HEADER_BYTES = 4 * 1024 * 1024  # a request's first frame: (config, batch, partition, frames to follow)
READY = b"ready\n"  # the one line the writer prints on stdout once it listens
_HEADER = struct.Struct(">Q")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class FramingError(IkkaiError):
    """A frame on the executor writer's socket broke off, ran late or was too large."""

    def __init__(self, problem: str, fix: str = "the task fails and Spark retries it") -> None:
        super().__init__(f"executor writer socket: {problem}", fix=fix)


def _receive(conn: socket.socket, size: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no whole frame before the deadline")
        conn.settimeout(remaining)
        chunk = conn.recv(min(size - got, 1 << 20))
        if not chunk:
            raise FramingError(f"the peer hung up after {got} of {size} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_bytes(conn: socket.socket, max_bytes: int, deadline: float) -> bytes:
    """One frame's bytes, whole before ``deadline`` (``time.monotonic``), at most ``max_bytes``; else TimeoutError."""
    (size,) = _HEADER.unpack(_receive(conn, _HEADER.size, deadline))
    if size > max_bytes:
        raise FramingError(
            f"a frame of {size:,} bytes, more than the {max_bytes:,} bytes a frame may have",
            fix="the task and the executor writer are of different ikkai versions (the task cuts its batch into frames "
            "of the bound): stop the job, let its executors' writers exit with them, and start it again",
        )
    return _receive(conn, size, deadline)


def read_frame(conn: socket.socket, max_bytes: int, deadline: float) -> Any:
    """One pickled frame (``read_bytes``), unpickled."""
    # Only a process of this user reaches the socket (0600 in a 0700 folder, SO_PEERCRED checked): the
    # bytes come from the sink's own tasks, which Spark already feeds pickles of the same objects.
    return pickle.loads(read_bytes(conn, max_bytes, deadline))  # noqa: S301


def send_bytes(conn: socket.socket, payload: bytes | memoryview, deadline: float) -> None:
    conn.settimeout(max(deadline - time.monotonic(), 0.001))
    conn.sendall(_HEADER.pack(len(payload)))
    conn.sendall(payload)


def send_frame(conn: socket.socket, content: Any, deadline: float) -> None:
    send_bytes(conn, pickle.dumps(content, protocol=pickle.HIGHEST_PROTOCOL), deadline)


def read_request(conn: socket.socket, deadline: float) -> tuple[SinkConfig, int, int, list[Record], list[int]]:
    """A task's request: its header frame, then its records as Arrow IPC frames of at most the config's
    ``frame_bytes`` (``record_table.ipc_frames``); the records as tuples, and their sizes (``record_bytes``)."""
    config, batch_id, partition, frames = read_frame(conn, MAX_HEADER_BYTES, deadline)
    if not isinstance(config, SinkConfig):
        raise TypeError(f"a request for {type(config).__name__}, not a SinkConfig")
    bound = frame_bytes(config) + FRAME_SLACK_BYTES
    table = read_frames([read_bytes(conn, bound, deadline) for _ in range(frames)])
    return config, batch_id, partition, table_records(table), table_sizes(table).tolist()


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket."""
    pid, uid, _ = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return pid, uid


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives a pickle round trip, else an error that says what it was."""
    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301  # our own bytes, never a peer's
        return exc
    except Exception:  # noqa: BLE001  # any unpicklable error is reported by name and text
        return IkkaiError(f"executor writer: {type(exc).__name__}: {exc}", fix="see the executor's stderr")


class _Writer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # every task of the executor may connect at once

    def __init__(self, path: str) -> None:
        self.locks: dict[tuple[str, str], threading.Lock] = {}
        self.pool = ProducerPool(max_producers=None)  # evicted by evict(), never while a request holds one
        self.guard = threading.Lock()  # over locks, active and last_request
        self.active = 0
        self.last_request = time.monotonic()
        previous = os.umask(0o177)  # the socket is 0600 from its first moment
        try:
            super().__init__(path, _Request)
        finally:
            os.umask(previous)

    def lock_for(self, key: tuple[str, str]) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(key, threading.Lock())

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        with self.guard:
            self.active += 1
        try:
            yield
        finally:
            with self.guard:
                self.active -= 1
                self.last_request = time.monotonic()

    def idle_for(self) -> float:
        with self.guard:
            return 0.0 if self.active else time.monotonic() - self.last_request

    def evict(self) -> None:
        """Close the oldest producers beyond ``MAX_PRODUCERS``, skipping any a request holds."""
        kept = self.pool.oldest_first()
        for key in kept[: max(len(kept) - MAX_PRODUCERS, 0)]:
            lock = self.lock_for(key)
            if lock.acquire(blocking=False):
                try:
                    self.pool.evict(key)
                finally:
                    lock.release()


class _Request(socketserver.BaseRequestHandler):
    server: _Writer

    def handle(self) -> None:
        conn: socket.socket = self.request
        if peer_credentials(conn)[1] != os.getuid():
            return  # another user: not a word
        with self.server.serving():
            deadline = time.monotonic() + REQUEST_DEADLINE_S
            try:
                config, batch_id, partition, records, sizes = read_request(conn, deadline)
            except FramingError as exc:  # a frame over the bound: said to the task, which raises it
                sys.stderr.write(f"ikkai executor writer: a request refused: {exc}\n")
                with contextlib.suppress(OSError):
                    send_frame(conn, ("error", exc), deadline)
                return
            except (OSError, pickle.UnpicklingError, ValueError, TypeError) as exc:  # ArrowInvalid is a ValueError
                sys.stderr.write(f"ikkai executor writer: a request broke off: {exc}\n")
                return
            answer = self.write(config, batch_id, partition, records, sizes)
        self.server.evict()
        with contextlib.suppress(OSError):  # the task is gone (killed, failed): its retry reads the marker
            send_frame(conn, answer, time.monotonic() + REQUEST_DEADLINE_S)

    def write(
        self, config: SinkConfig, batch_id: int, partition: int, records: list[Record], sizes: list[int]
    ) -> tuple[str, object]:
        txn_id = config.transactional_id(partition)
        lock = self.server.lock_for((config.cluster.bootstrap_servers, txn_id))
        if not lock.acquire(blocking=False):
            # The request of an earlier attempt still writes: this one goes on once it committed or aborted.
            sys.stderr.write(f"ikkai executor writer: batch {batch_id} waits for transactional.id {txn_id}\n")
            sys.stderr.flush()
            lock.acquire()
        try:
            result: PartitionResult = write_partition(config, batch_id, partition, records, self.server.pool, sizes)
            return "result", result
        except Exception as exc:  # noqa: BLE001  # every failure goes back to the task, which raises it
            traceback.print_exc(file=sys.stderr)
            return "error", _portable(exc)
        finally:
            lock.release()


def started_at(pid: int) -> int:
    """When process ``pid`` started, in clock ticks after boot (``/proc``): with the pid, who it is; 0 if gone.

    Read by hand, not through ``psutil.Process.create_time()``: that adds the boot time, which the kernel moves
    when the wall clock is stepped, so two processes (the writer, its client) could name one start differently.
    """
    try:
        return proc_stat_field(pid, 22)  # starttime
    except (OSError, ValueError, IndexError):
        return 0


def proc_stat_field(pid: int, field: int) -> int:
    """Field ``field`` (numbered as ``proc(5)`` numbers them, from 1) of ``/proc/<pid>/stat``, a number.

    The command (field 2) is in parentheses and may hold spaces and parentheses itself: the fields after it are
    counted from its last ``)``. Raises ``OSError`` for a process that is gone, ``ValueError``/``IndexError`` for a
    field that is not there.
    """
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[field - 3])


def serve(path: Path, executor_pid: int, executor_started: int, idle_s: float = IDLE_S) -> None:
    """Listen on ``path`` until the executor (its pid and start) is gone or nobody asked for ``idle_s``; then abort
    what is open. The start time tells a new process that got the executor's pid from the executor itself."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a dead predecessor's (the client starts a writer only when nobody answers there)
    server = _Writer(str(path))
    inode = path.stat().st_ino
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # nothing more on the pipe the client read
    try:
        while started_at(executor_pid) == executor_started and server.idle_for() < idle_s:
            time.sleep(EXECUTOR_POLL_S)
    finally:
        with contextlib.suppress(OSError):
            if path.stat().st_ino == inode:
                path.unlink()  # no new request reaches this writer: the next task starts another
        server.shutdown()
        for key in server.pool.oldest_first():  # aborts what is open; a request still writing
            lock = server.lock_for(key)  # when the JVM went is cut off at exit, its successor fences it
            if lock.acquire(blocking=False):
                server.pool.evict(key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.sink.executor_writer")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--executor-pid", type=int, required=True)
    parser.add_argument("--executor-started", type=int, required=True)
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    args = parser.parse_args(argv)
    serve(args.socket, args.executor_pid, args.executor_started, args.idle_s)


if __name__ == "__main__":
    # Run as the imported module, not as __main__: the errors it answers with (a FramingError) then pickle under
    # their importable name, and the task unpickles them as themselves.
    from spark_jobs.sink import executor_writer

    executor_writer.main()

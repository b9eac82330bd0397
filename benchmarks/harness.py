"""What every benchmark script shares: the stack, job processes, memory sampling, A/B rounds, tables.

Benchmarks print tables and assert nothing about time. On a shared machine the absolute numbers
move with the load, so the scripts alternate the variants they compare (A B A B ...) in one run
and report ratios per round; ``median`` of those is the number to quote.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from ikkai.contract.kafka import KafkaContext

REPO = Path(__file__).resolve().parents[1]  # the scripts run as ``python -m benchmarks.<name>`` from here


# ---------------------------------------------------------------- tables and statistics (pure)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: text columns left-aligned, numbers right-aligned, floats with 2 decimals or fewer."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True))

    return "\n".join([line(headers).rstrip(), *(line(row).rstrip() for row in cells)])


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    print(f"\n## {title}\n", flush=True)
    print(format_table(headers, rows), flush=True)


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)) or value is None


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def alternating(variants: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, variant) in A B A B order: every round runs each variant once, the order kept."""
    return [(r, v) for r in range(1, rounds + 1) for v in variants]


def rotated(variants: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, variant), every round each variant once, the order turned by one place per round (A B C, B C A,
    C A B, ...): over ``len(variants)`` rounds each variant runs once in every position (a Latin square), so
    what warms or tires the machine run after run does not always favour the same one."""
    count = len(variants)
    return [(r, variants[(i + r - 1) % count]) for r in range(1, rounds + 1) for i in range(count)]


# ---------------------------------------------------------------- memory of a process tree


@dataclass(frozen=True)
class ProcStat:
    """What the benchmarks read of one live process (psutil): its parent, its CPU, when it started, its name."""

    ppid: int
    own_cpu_s: float  # user + system CPU it spent itself (not its reaped children's)
    children_cpu_s: float  # user + system CPU of the children it has reaped
    started: float  # epoch seconds; with the pid, which process it is
    name: str


def proc_stats() -> dict[int, ProcStat]:
    """Every live process's ``ProcStat``, read in one pass."""
    stats: dict[int, ProcStat] = {}
    for process in psutil.process_iter(["ppid", "cpu_times", "create_time", "name"]):
        info = process.info
        times = info["cpu_times"]
        if times is None or info["ppid"] is None:  # gone, or not ours to read
            continue
        reaped = times.children_user + times.children_system
        stats[process.pid] = ProcStat(
            info["ppid"], times.user + times.system, reaped, info["create_time"] or 0.0, info["name"] or ""
        )
    return stats


def process_tree(root: int, stats: dict[int, ProcStat] | None = None) -> set[int]:
    """``root`` and every live descendant, by parent links: not by process group, because PySpark's
    daemon moves itself and its Python workers into a group of their own. An executor writer
    (``--transactional-writer executor``) counts with the executor JVM it serves: the Python worker
    that started it may have exited, leaving it a child of init, outside the tree by parent links."""
    stats = proc_stats() if stats is None else stats
    tree, frontier = {root}, [root]
    while True:
        while frontier:
            parent = frontier.pop()
            children = [pid for pid, stat in stats.items() if stat.ppid == parent and pid not in tree]
            tree.update(children)
            frontier.extend(children)
        frontier = [pid for pid, executor in executor_writers(stats).items() if executor in tree and pid not in tree]
        if not frontier:
            return tree & (stats.keys() | {root})
        tree.update(frontier)


EXECUTOR_WRITER_MODULE = "spark_jobs.sink.executor_writer"


def executor_writers(stats: dict[int, ProcStat]) -> dict[int, int]:
    """Every live executor writer process → the executor JVM's pid it serves (its ``--executor-pid``)."""
    writers: dict[int, int] = {}
    for pid in stats:
        try:
            argv = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        if EXECUTOR_WRITER_MODULE in argv and "--executor-pid" in argv:
            index = argv.index("--executor-pid") + 1
            if index < len(argv) and argv[index].isdigit():
                writers[pid] = int(argv[index])
    return writers


def tree_memory_bytes(root: int) -> int:
    """Proportional set size (PSS) of a job's process tree: the forked Python workers share their
    daemon's pages, which a sum of resident sets would count once per process."""
    total = 0
    for pid in process_tree(root):
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            continue
    return total


class PeakMemory:
    """Samples a process tree's memory (PSS) every ``interval`` seconds; ``peak`` in bytes."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root = root
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak = max(self.peak, tree_memory_bytes(self.root))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


# ---------------------------------------------------------------- the stack and job processes


@contextmanager
def bench_stack(prefix: str) -> Iterator[tuple[KafkaContext, str, Path]]:
    """(Kafka cluster, connect_url, scratch folder): the cluster named by IKKAI_BOOTSTRAP_SERVERS / IKKAI_CONNECT_URL
    (with IKKAI_KAFKA_CONFIG's client file), else an embedded stack in a temporary home, stopped afterwards. The
    cluster is resolved here, once, for the whole benchmark."""
    from ikkai.contract.kafka import KafkaContext
    from ikkai.settings import external_endpoints, jars_dir
    from stack.local_stack import LocalStack

    if threading.current_thread() is threading.main_thread():
        # Stopped by SIGTERM (kill, a timeout): leave through the finally below, so the stack is stopped too. Python's
        # default for SIGTERM ends the process at once and left the broker and Connect running.
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix=f"ikkai-{prefix}-") as tmp:
        home = Path(tmp)
        external = external_endpoints()
        if external is not None:
            yield KafkaContext.recorded(external), external.connect_url, home
            return
        stack = LocalStack(home / "stack", jars_dir(), progress=sys.stderr)
        try:
            endpoints = stack.up()
            yield KafkaContext.recorded(endpoints), endpoints.connect_url, home
        finally:
            stack.down()


@dataclass
class JobProcess:
    """A job in its own process group; its stderr lines are kept, ``marks`` timestamps lines that match."""

    command: list[str]
    cwd: Path = REPO
    env: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    batches: list[float] = field(default_factory=list)  # monotonic time of each "batch N ..." line
    started: float | None = None  # monotonic time of the job's first line with ``start_marker``: Spark is up
    start_marker: str = ": model "  # the infer job's; the enrich job's is ", mode "
    stamped: list[tuple[float, str]] = field(default_factory=list)  # (monotonic arrival, line) of every line
    # Read stdout too, with stderr: a job sent through spark-submit (``ikkai jobs run --master spark://``) has its
    # Python driver's stderr on spark-submit's stdout (Spark's PythonRunner merges the two).
    merge_stdout: bool = False

    def __post_init__(self) -> None:
        # Merged: both on one pipe, stdout's, which the reader reads instead of stderr's.
        stdout, stderr = (
            (subprocess.PIPE, subprocess.STDOUT) if self.merge_stdout else (subprocess.DEVNULL, subprocess.PIPE)
        )
        self.process = subprocess.Popen(
            self.command, cwd=self.cwd, stdout=stdout, stderr=stderr, text=True,
            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )  # fmt: skip
        self.memory = PeakMemory(self.process.pid)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        lines = self.process.stdout if self.merge_stdout else self.process.stderr
        assert lines is not None
        for line in lines:
            self.stamped.append((time.monotonic(), line))
            self.log.append(line)
            if self.started is None and self.start_marker in line:
                self.started = time.monotonic()
            if ": batch " in line:
                self.batches.append(time.monotonic())

    def wait_started(self, timeout: float = 300) -> None:
        give_up_at = time.monotonic() + timeout
        while self.started is None:
            if self.process.poll() is not None or time.monotonic() > give_up_at:
                raise SystemExit(f"the job did not start:\n{self.tail()}")
            time.sleep(0.05)

    def wait(self, timeout: float = 1800) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        self.memory.stop()
        return code

    def run_to_end(self, name: str) -> float:
        """Seconds from the start marker (Spark up) to the job's exit; a job that fails stops the benchmark."""
        self.wait_started()
        code = self.wait()
        assert self.started is not None
        seconds = time.monotonic() - self.started
        if code != 0:
            raise SystemExit(f"{name} failed:\n{self.tail()}")
        return seconds

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after 20 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.wait(60)

    def tail(self, lines: int = 30) -> str:
        return "".join(self.log[-lines:])


def python_module(module: str, *args: str, code: Path | None = None) -> tuple[list[str], Path, dict[str, str]]:
    """(command, cwd, env) running ``python -m module`` from this checkout, or from the checkout ``code``."""
    if code is None:
        return [sys.executable, "-m", module, *args], REPO, {}
    return [sys.executable, "-m", module, *args], code, {"PYTHONPATH": str(code)}


# ---------------------------------------------------------------- the JVM tools of the stack's jars


def kafka_classpath() -> str:
    from ikkai.settings import jars_dir
    from stack.artifacts import resolved_jars

    jars = resolved_jars(jars_dir())
    if jars is None:
        raise SystemExit("the Kafka jars are not resolved: run `make setup` (ikkai setup) first")
    return jars.kafka_classpath()


def java() -> str:
    from stack.prerequisites import java_executable

    found = java_executable()
    if found is None:
        raise SystemExit("no java found: install a JDK 17+")
    return str(found)

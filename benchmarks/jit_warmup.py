"""When a job's JVMs stopped compiling: the warm-up ends by events and by JIT activity, not by a batch count.

A fresh JVM compiles thousands of methods in its first tens of seconds and gets faster while it does (the Spark
driver's CPU per event fell by a third inside one window when the warm-up was three batches). The JIT is
*settled* once the JVMs' total compilations grew by at most ``max_new`` over the last ``span_s`` seconds.
The count comes from ``jstat -compiler <pid>`` (the HotSpot ``sun.ci`` counters): each call starts a small JVM
of its own (about 0.3 s of CPU), so a sampler runs only through the warm-up and once at each end of a window.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.harness import proc_stats, process_tree

JSTAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+", re.MULTILINE)


# ---------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class SettleRule:
    """Settled: at most ``max_new`` compilations over the last ``span_s`` seconds (all the job's JVMs together)."""

    span_s: float = 10.0
    max_new: int = 50


def jit_settled(samples: Sequence[tuple[float, int]], rule: SettleRule) -> bool:
    """True when the samples (monotonic time, cumulative compilations), in time order, cover ``rule.span_s`` and
    the count grew by at most ``rule.max_new`` since the last sample at or before ``span_s`` ago."""
    if not samples:
        return False
    now, latest = samples[-1]
    before = [count for at, count in samples if at <= now - rule.span_s]
    return bool(before) and latest - before[-1] <= rule.max_new


def compilations(jstat_output: str) -> int | None:
    """The ``Compiled`` column of ``jstat -compiler`` output; None when there is none (the JVM was gone)."""
    found = JSTAT_ROW.search(jstat_output.split("\n", 1)[-1])
    return int(found[1]) if found else None


# ---------------------------------------------------------------- I/O: the JVMs of a job


def jvm_pids(roots: Sequence[int]) -> list[int]:
    """Every ``java`` process in the trees of ``roots`` (the job's Spark JVMs)."""
    stats = proc_stats()
    return sorted({pid for root in roots for pid in process_tree(root, stats) if stats.get(pid) and
                   stats[pid].name == "java"})  # fmt: skip


def jvm_compilations(roots: Sequence[int]) -> int:
    """Total compilations of the JVMs under ``roots`` now (a JVM that just exited counts 0)."""
    total = 0
    for pid in jvm_pids(roots):
        try:
            out = subprocess.run(["jstat", "-compiler", str(pid)], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        total += compilations(out.stdout) or 0
    return total


class CompilationSampler:
    """(monotonic time, total compilations of the jobs' JVMs) every ``interval`` s until ``stop``."""

    def __init__(self, roots: Sequence[int], interval: float = 2.0) -> None:
        self.roots = list(roots)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()

        def run() -> None:
            while True:
                count = jvm_compilations(self.roots)
                if count:
                    self.samples.append((time.monotonic(), count))
                if self._stop.wait(interval):
                    return

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def settled(self, rule: SettleRule) -> bool:
        return jit_settled(list(self.samples), rule)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

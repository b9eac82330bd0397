"""How much a JVM is still compiling: its JIT compilation count, read from its performance-data file.

Every HotSpot JVM keeps its counters in a memory-mapped file, ``<temp>/hsperfdata_<user>/<pid>`` (what
``jstat`` and ``jcmd <pid> PerfCounter.print`` read); ``sun.ci.totalCompiles`` is ``jstat -compiler``'s
"Compiled". Reading the file is a few microseconds and starts no tool JVM, so a benchmark can sample it
every quarter second on a loaded machine. A JVM started with ``-XX:-UsePerfData`` has no file: None.

The warm-up rule (``compilations_settled``): a window starts only once the count rose by less than a
threshold over the last few seconds, so the JIT's own work, and the speed-up it brings, fall outside it.
"""

from __future__ import annotations

import getpass
import struct
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

MAGIC = b"\xca\xfe\xc0\xc0"
TOTAL_COMPILES = "sun.ci.totalCompiles"
_PROLOGUE = 32  # magic, byte order, versions, accessible, used, overflow, modification time, entry offset, entries
_ENTRY = struct.Struct("iiibbbbi")  # length, name offset, vector length, type, flags, units, variability, data offset


def perf_counter(data: bytes, name: str) -> int | None:
    """The long counter ``name`` of a performance-data file's bytes, or None if it has none. Pure."""
    if len(data) < _PROLOGUE or data[:4] != MAGIC:
        return None
    order = "<" if data[4] == 1 else ">"
    entry_offset, entries = struct.unpack_from(f"{order}ii", data, 24)
    entry = struct.Struct(order + _ENTRY.format)
    wanted = name.encode()
    at = entry_offset
    for _ in range(entries):
        if at + entry.size > len(data):
            return None
        length, name_offset, vector_length, kind, _f, _u, _v, data_offset = entry.unpack_from(data, at)
        if length <= 0:
            return None
        start = at + name_offset
        end = data.find(b"\0", start, at + length)
        if data[start:end] == wanted and kind == ord("J") and vector_length == 0:
            return int(struct.unpack_from(f"{order}q", data, at + data_offset)[0])
        at += length
    return None


def perf_file(pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"hsperfdata_{getpass.getuser()}" / str(pid)


def compilations(pids: Iterable[int]) -> int | None:
    """JIT compilations so far of these JVMs, summed; None if none of them has a readable file."""
    counts = []
    for pid in pids:
        try:
            count = perf_counter(perf_file(pid).read_bytes(), TOTAL_COMPILES)
        except OSError:
            continue
        if count is not None:
            counts.append(count)
    return sum(counts) if counts else None


def compilations_settled(samples: Sequence[tuple[float, int | None]], *, quiet_s: float, threshold: int) -> bool:
    """Whether the JIT has settled: the count rose by less than ``threshold`` over the last ``quiet_s`` seconds.

    ``samples`` are (seconds, compilations so far) in time order; they must span ``quiet_s`` at least. No
    count known (no performance-data file) is never settled: the caller's cap ends such a warm-up. Pure.
    """
    known = [(t, c) for t, c in samples if c is not None]
    if not known:
        return False
    end, last = known[-1]
    before = [c for t, c in known if t <= end - quiet_s]
    return bool(before) and last - before[-1] < threshold

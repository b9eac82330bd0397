"""Progress per stage on stderr: bars redrawn in place on a terminal, a plain line now and then otherwise.

``render_bars`` and ``render_line`` are pure; ``ProgressDisplay`` only decides when to write.
No colour anywhere, and no cursor movement unless stderr is a TTY.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

BAR_WIDTH = 30
PLAIN_INTERVAL_S = 10.0


def stack_line(bootstrap_servers: str, connect_urls: list[str], spark_master: str | None = None, workers: int = 0,
               spark_uis: tuple[str, ...] = ()) -> str:  # fmt: skip
    """The line naming the demo's stack: Kafka, every Connect worker, and on a Spark cluster its master and the
    web UIs of the master and of each worker (``spark_uis``, the master's first: a job's executors and their logs)."""
    line = f"stack: Kafka {bootstrap_servers}, Connect {', '.join(connect_urls)}"
    if not spark_master:
        return line
    uis = [f"master {url}" for url in spark_uis[:1]] + [f"worker {url}" for url in spark_uis[1:]]
    return f"{line}, Spark {spark_master} ({workers} workers" + (f"; web UIs: {', '.join(uis)})" if uis else ")")


@dataclass(frozen=True)
class StageProgress:
    stage: str  # ingested, enriched, decided, delivered
    done: int
    total: int | None  # None: not known yet

    @property
    def fraction(self) -> float:
        if not self.total:
            return 0.0
        return min(1.0, self.done / self.total)


def render_bars(stages: list[StageProgress], width: int = BAR_WIDTH) -> list[str]:
    lines = []
    for s in stages:
        filled = int(s.fraction * width)  # full only when done
        total = "?" if s.total is None else str(s.total)
        lines.append(
            f"{s.stage:<10} [{'#' * filled}{'.' * (width - filled)}] {s.done:>7}/{total:<7} {s.fraction:>4.0%}"
        )
    return lines


def render_line(stages: list[StageProgress], elapsed_s: float) -> str:
    parts = [f"{s.stage} {s.done}/{'?' if s.total is None else s.total}" for s in stages]
    return f"progress {elapsed_s:>5.0f}s: " + ", ".join(parts)


class ProgressDisplay:
    """Writes progress to ``stream``; messages in between (``say``) keep the bars below them."""

    def __init__(self, stream: TextIO = sys.stderr, *, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self._drawn = 0  # bar lines currently on screen
        self._last_plain = 0.0
        self._last: list[StageProgress] = []

    def update(self, stages: list[StageProgress], *, force: bool = False) -> None:
        self._last = stages
        if self.tty:
            self._erase()
            lines = render_bars(stages)
            self.stream.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        else:
            now = time.monotonic()
            if force or now - self._last_plain >= PLAIN_INTERVAL_S:
                self.stream.write(render_line(stages, now - self.started) + "\n")
                self._last_plain = now
        self.stream.flush()

    def say(self, message: str) -> None:
        self._erase()
        self.stream.write(message.rstrip("\n") + "\n")
        if self.tty and self._last:
            lines = render_bars(self._last)
            self.stream.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        self.stream.flush()

    def finish(self) -> None:
        """Leave the last bars (or one last plain line) on screen."""
        if not self.tty and self._last:
            self.stream.write(render_line(self._last, time.monotonic() - self.started) + "\n")
        self._drawn = 0
        self.stream.flush()

    def _erase(self) -> None:
        if self.tty and self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")  # cursor up N lines, clear to the end
            self._drawn = 0


class LineWriter:
    """A text stream (for LocalStack's and setup's progress) that hands each complete line to ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            if line.strip():
                self._say(line)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

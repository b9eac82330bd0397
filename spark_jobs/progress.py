"""``--progress``: each micro-batch's Spark progress as one line on stderr, for operators and the benchmarks.

Spark reports every finished trigger as a ``StreamingQueryProgress`` (its input rows and its durations
by phase: ``addBatch`` is the sink's write, ``walCommit``/``commitOffsets`` the checkpoint's two
writes, ``latestOffset`` the source's offset query). A job started with ``--progress`` registers a
``StreamingQueryListener`` and writes each trigger that read something as::

    progress {"batchId":7,"numInputRows":25000,"timestamp":"...","durationMs":{"addBatch":812,...}}

Idle triggers (no input rows) are left out. The listener runs on the driver, called back once per
trigger; it reads nothing from Kafka and adds nothing to a batch's work.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import IO, Any

from pyspark.sql.streaming.listener import StreamingQueryListener

PREFIX = "progress "
KEPT = ("batchId", "numInputRows", "timestamp", "durationMs")


def progress_line(progress: dict[str, Any]) -> str:
    """The line written for one trigger: its batch id, input rows, start and durations by phase."""
    return PREFIX + json.dumps({key: progress.get(key) for key in KEPT}, separators=(",", ":")) + "\n"


def parse_progress(lines: Sequence[tuple[float, str]]) -> list[tuple[float, dict[str, Any]]]:
    """(arrival, progress) of every ``progress {json}`` line among (arrival, line) pairs; other lines ignored."""
    found = []
    for at, line in lines:
        start = line.find(PREFIX + "{")
        if start >= 0:
            found.append((at, json.loads(line[start + len(PREFIX) :])))
    return found


class ProgressLines(StreamingQueryListener):
    """Writes ``progress_line`` of every trigger that read input rows to ``stream``."""

    def __init__(self, stream: IO[str] = sys.stderr) -> None:
        self.stream = stream

    def onQueryStarted(self, event: Any) -> None:  # the names are Spark's listener interface
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        if progress.get("numInputRows"):
            self.stream.write(progress_line(progress))
            self.stream.flush()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

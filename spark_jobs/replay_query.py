"""A replay as a second query of a running job: the same session, its own name, checkpoint and output topics.

A continuous job started with ``--replay-requests DIR`` watches DIR for requests. A request is a
file ``<query>.request`` holding JSON ``{"checkpoint": "...", "suffix": ".replay"}``; the job
starts one bounded query beside the live one:

- named ``<query>`` (so its ``transactional.id``\\ s ``<app>.<query>.<p>`` and its commits topic are
  its own: it never fences the live query's producers nor reads its markers), refused when it is
  the live query's name;
- reading the live query's input from the earliest offsets up to the end offsets at its start
  (``availableNow``), in batches of the default bound (the live query's ``--max-offsets-per-trigger``
  is for latency, not for a drain), with a fresh checkpoint of its own, refused when it is the
  live query's;
- writing every output topic of the job with ``suffix`` appended (refused empty: nothing re-decides
  into live output topics, docs/exactly-once.md). The suffixed topics must exist, with the live layout.

The output is what ``python -m spark_jobs.<job> --query <query> --checkpoint … --input <the live
input>`` with the suffixed topics writes: the same plan, the same writer, the same input; but infer's
replay decides each input offset range with the model version the live query's markers record for it
(``spark_jobs.infer.recorded_cut``), so it writes the live bytes across a cutover. What it saves is a
Spark driver, its JVM and Python workers per replay. When the query ends the job writes
``<query>.done`` beside the request: ``{"ok": true}`` or ``{"ok": false, "error": "<one line>"}``. A
request without its ``.done`` is taken up again when the job restarts; its checkpoint and markers
make that a continuation, exactly once, like any query's restart.

Why a file and not an option given at the start: whoever asks for the replay (the demo) knows when
the input is complete, the job does not; a file in a folder of the job's own can be written at that
moment without a new process, and it is read by a job on any master whose driver sees the folder.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ikkai.errors import ConfigError, IkkaiError
from ikkai.private_folders import private_folder

REQUEST, DONE = ".request", ".done"
POLL_S = 0.5  # how often the folder is looked at: a replay starts within this of its request


@dataclass(frozen=True)
class ReplayRequest:
    """One replay a running job was asked for."""

    query: str
    checkpoint: str
    suffix: str

    @property
    def done_name(self) -> str:
        return f"{self.query}{DONE}"


class LiveQuery(Protocol):
    """What a request is checked against: the live query's options (``streaming_job.StreamingOptions``)."""

    @property
    def query(self) -> str: ...

    @property
    def checkpoint(self) -> Path | str: ...

    @property
    def input_topic(self) -> str: ...


def read_request(path: Path, live: LiveQuery) -> ReplayRequest:
    """The request in ``path``, checked against the live query; a ``ConfigError`` says what is wrong. Pure but
    for the read."""
    query = path.name.removesuffix(REQUEST)
    where = str(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(where, "request", f"unreadable: {exc}", fix='write {"checkpoint": …, "suffix": …}') from exc
    if not isinstance(document, dict) or set(document) != {"checkpoint", "suffix"}:
        raise ConfigError(where, "request", "holds other keys than checkpoint and suffix",
                          fix='write {"checkpoint": "<a fresh folder>", "suffix": ".replay"}')  # fmt: skip
    checkpoint, suffix = document["checkpoint"], document["suffix"]
    if not isinstance(checkpoint, str) or not isinstance(suffix, str):
        raise ConfigError(where, "request", "checkpoint and suffix are strings", fix="write them as strings")
    if query == live.query:
        raise ConfigError(where, "query", f"{query} is the live query's name: it would share its transactional.ids "
                          "and markers", fix="name the replay's query differently, e.g. <query>-replay")  # fmt: skip
    if not suffix:
        raise ConfigError(where, "suffix", "empty: the replay would write into the live output topics",
                          fix="give the replay's topics a suffix, e.g. .replay")  # fmt: skip
    if checkpoint.rstrip("/") == str(live.checkpoint).rstrip("/"):
        raise ConfigError(where, "checkpoint", "is the live query's", fix="give the replay a fresh folder")
    return ReplayRequest(query, checkpoint, suffix)


class ReplayRequests:
    """The watcher: one daemon thread looking at the folder, running each new request's query to its end."""

    def __init__(self, folder: Path, live: LiveQuery, run: Callable[[ReplayRequest], None]) -> None:
        """``run`` runs a checked request's query to its end (``streaming_job.run_replay``), raising its failure."""
        self.folder, self.live, self.run = folder, live, run
        self._stop = threading.Event()
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._watch, name="ikkai-replay-requests", daemon=True)

    def __enter__(self) -> ReplayRequests:
        requests_folder(self.folder)
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            for path in sorted(self.folder.glob(f"*{REQUEST}")):
                if path.name not in self._seen and not path.with_suffix(DONE).exists():
                    self._seen.add(path.name)
                    self._run(path)

    def _run(self, path: Path) -> None:
        outcome: dict[str, Any] = {"ok": True}
        try:
            request = read_request(path, self.live)
            sys.stderr.write(f"{self.live.query}: replay {request.query} of {self.live.input_topic} "
                             f"into *{request.suffix} beside the live query\n")  # fmt: skip
            self.run(request)
        except IkkaiError as exc:
            outcome = {"ok": False, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the replay's failure is its outcome; the live query goes on
            outcome = {"ok": False, "error": failure_line(exc)}
        sys.stderr.write(f"{self.live.query}: replay {path.name.removesuffix(REQUEST)} ended: {outcome}\n")
        staged = path.with_suffix(".done-staged")
        staged.write_text(json.dumps(outcome))
        staged.replace(path.with_suffix(DONE))


def failure_line(exc: BaseException) -> str:
    """A failure in one line: Spark's own message (the JVM's, for a call into it), not Py4J's call site. Pure."""
    java = getattr(exc, "java_exception", None)  # py4j's Py4JJavaError: "An error occurred while calling o253.start"
    text = str(java if java is not None else exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


def requests_folder(folder: Path) -> Path:
    """``folder``, created 0700; refused unless it is a folder of this user that nobody else can write (rule 11).

    Whoever can write a request makes the job read its whole input and write it into topics with a
    suffix; a folder another user can write (or swap: a symbolic link) is not the job's own.
    """
    return private_folder(folder, "--replay-requests", "whoever can write a request there replays the job's input")


def request_replay(folder: Path, query: str, checkpoint: str, suffix: str) -> Path:
    """Ask the job watching ``folder`` for a replay (written whole, then renamed); the path its outcome will have."""
    requests_folder(folder)
    staged = folder / f"{query}.request-staged"
    staged.write_text(json.dumps({"checkpoint": checkpoint, "suffix": suffix}))
    staged.replace(folder / f"{query}{REQUEST}")
    return folder / f"{query}{DONE}"


def read_outcome(done: Path) -> dict[str, Any] | None:
    """The outcome a job wrote for a replay; None while it runs."""
    try:
        outcome = json.loads(done.read_text())
    except FileNotFoundError:
        return None
    return outcome if isinstance(outcome, dict) else {"ok": False, "error": f"{done}: not an outcome"}

"""The demo's replays: each job's input again from its start into fresh ``*.replay`` topics, timed and awaited.

A replay starts once its input is complete. Where the live jobs run on ``local[2]`` it is a second
query of the running live job (``spark_jobs.replay_query``): the demo writes a request into the
job's replay folder and waits for the job's ``.done``; no new Spark driver starts. Where the live
jobs run on a Spark cluster it is a job process of its own on ``local[2]``, as the lineup says, so
the replay's digests compare the cluster's output with another runtime's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from demo.children import Child, DemoProcessError
from demo.lineup import Lineup
from demo.phases import PhaseClock
from ikkai.contract.topics import EVENTS_PAYMENTS, INGEST_PAYMENTS
from spark_jobs.replay_query import read_outcome, request_replay

REPLAYED_JOBS = ("enrich", "infer")
POLL_S = 0.5


@dataclass
class ReplayRun:
    """One replay: its own process, or a second query of ``live`` (then ``done`` is where the job tells the end)."""

    name: str
    started: float  # time.monotonic()
    process: Child | None = None
    done: Path | None = None  # the job's outcome file, for a second query
    live: Callable[[], Child] | None = None  # the live job running the second query (the latest, after restarts)

    def outcome(self) -> str | None:
        """None while it runs; "" when it succeeded; else what went wrong."""
        if self.process is not None:
            code = self.process.process.poll()
            return None if code is None else ("" if code == 0 else f"exited with code {code}")
        assert self.done is not None and self.live is not None
        outcome = read_outcome(self.done)
        if outcome is not None:
            return "" if outcome.get("ok") else f"failed in the live job: {outcome.get('error')}"
        if not self.live().alive():
            return "the live job ended before its replay"
        return None

    @property
    def job(self) -> Child:
        """The process whose log tells how the replay went."""
        return self.process if self.process is not None else self.live()  # type: ignore[misc]


class Replays:
    """Starts each replay once its input is complete, times it as phase ``replay: <name>``, waits for all."""

    def __init__(
        self,
        clock: PhaseClock,
        say: Callable[[str], None],
        lineup: Callable[[], Lineup],
        start: Callable[[tuple[str, list[str]]], Child],
        live: Callable[[str], Child],
        retire: Callable[[str], None],
    ) -> None:
        self.clock, self.say, self.lineup = clock, say, lineup
        self._start, self._live, self._retire = start, live, retire
        self.runs: dict[str, ReplayRun] = {}
        self._lock = threading.Lock()
        self._idle: set[str] = set()  # live jobs with no input left
        self._ended: set[str] = set()  # replays that ended

    @property
    def first_started(self) -> float:
        return min(run.started for run in self.runs.values())

    def start(self, ready: dict[str, bool] | None = None) -> None:
        """Start each replay whose input is complete (all of them when ``ready`` is None)."""
        lineup = self.lineup()
        for name in REPLAYED_JOBS:
            if name in self.runs or (ready is not None and not ready[name]):
                continue
            self.runs[name] = run = self._begin(lineup, name)
            if name == "infer":
                self.nothing_left("enrich")  # infer's input is complete: enrich has written it all
            if ready is None:
                self.nothing_left(name)
            phase = f"replay: {name}"
            self.clock.start(phase, at=run.started)
            threading.Thread(target=self._time, args=(run, phase), name=f"demo-{phase}", daemon=True).start()
            source = INGEST_PAYMENTS if name == "enrich" else EVENTS_PAYMENTS
            state = "complete now" if ready is not None else "as far as the pipeline got"
            where = (f"as a second query of the live job (pid {self._live(name).pid})" if run.process is None
                     else f"(pid {run.process.pid})")  # fmt: skip
            self.say(f"replay: {name} {where} from the start of {source}, {state}, into fresh *.replay topics "
                     "with a fresh checkpoint")  # fmt: skip

    def _begin(self, lineup: Lineup, name: str) -> ReplayRun:
        started = time.monotonic()
        if not lineup.replays_in_job:
            job = lineup.enrich(replay=True) if name == "enrich" else lineup.infer(replay=True)
            return ReplayRun(name, started, process=self._start(job))
        request = lineup.replay_request(name)
        done = request_replay(request.folder, request.query, str(request.checkpoint), request.suffix)
        return ReplayRun(name, started, done=done, live=lambda: self._live(name))

    def _time(self, run: ReplayRun, phase: str) -> None:
        while run.outcome() is None:
            time.sleep(POLL_S)
        self.clock.end(phase)
        with self._lock:
            self._ended.add(run.name)
            self._retire_if_done(run.name)

    def nothing_left(self, name: str) -> None:
        """The live job ``name`` has no input left: it is stopped, once its replay ended if that runs inside it."""
        with self._lock:
            self._idle.add(name)
            self._retire_if_done(name)

    def _retire_if_done(self, name: str) -> None:
        run = self.runs.get(name)
        inside = run is not None and run.process is None
        if name in self._idle and (not inside or name in self._ended):
            self._retire(name)

    def wait(self, timeout_s: float) -> bool:
        """Wait for every replay to end; False (said) when one failed or did not end within ``timeout_s``."""
        try:
            for name, run in self.runs.items():
                while (problem := run.outcome()) is None:
                    if time.monotonic() - run.started > timeout_s:
                        raise DemoProcessError(name, f"replay not done after {timeout_s:.0f}s", run.job.log)
                    time.sleep(POLL_S)
                if problem:
                    raise DemoProcessError(name, problem, run.job.log)
                self.say(f"replay: {name} done after {time.monotonic() - run.started:.0f}s")
        except DemoProcessError as exc:
            self.say(f"replay failed: {exc}")
            return False
        return True

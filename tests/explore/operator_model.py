"""The model of operator acts: what an operator may do to the infer job, and what must hold after each act.

``OperatorActs`` is a hypothesis ``RuleBasedStateMachine``. Its rules are acts on the real stack
(``operator_acts``); its state is the model: which query owns the live output, which queries
handed over or were taken over (retired), which one-time flags each query was first started
with, which events must by now have one live decision and which the operator excluded. Each act
says, before it runs, whether it is safe (it must run) or unsafe (it must be refused, and then
change nothing a reader sees); a few acts may go either way. After every act the invariant reads
every output topic read_committed (``output_checker``) and holds it against the model.

The class attributes (``bootstrap``, ``folder``, ``models``, ``pool``) are set by the test that
runs the machine; each example builds its own topics and query names.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from demo.pipeline_io import unique
from tests.explore.operator_acts import (
    FAILED,
    KILLED,
    RAN,
    REFUSED,
    Outcome,
    Pipeline,
    fresh_checkpoint,
    run_to_end,
    start_together,
)
from tests.explore.output_checker import Expected, Outputs, read_outputs, violations

LIVE = ("a", "b", "c")  # live query names (each example suffixes them)
CHECKPOINTS = ("same", "fresh", "older")
CHUNK = 20  # events per produce act
CRASH_BATCH = 10  # --max-offsets-per-trigger of the kill -9 act: its first batch covers part of the backlog


class OperatorActs(RuleBasedStateMachine):
    bootstrap: ClassVar[str]
    folder: ClassVar[Path]
    models: ClassVar[dict[str, str]]  # "v1"/"v2" -> model artifact path ("" for the shipped model)
    pool: ClassVar[list[dict[str, object]]]  # the events produce acts take from, in order
    skipped: ClassVar[frozenset[str]] = frozenset()  # acts left out (a soak exploring past a known finding)

    def __init__(self) -> None:
        super().__init__()
        self.pipeline = Pipeline.create(self.bootstrap, self.folder / unique("example"))
        self.names = {q: unique(q) for q in (*LIVE, "s")}
        self.produced = 0
        self.must_decide: frozenset[str] = frozenset()
        self.excluded: frozenset[str] = frozenset()
        self.owner = ""  # the live query that owns the output ("": none yet)
        self.retired: set[str] = set()  # handed over or taken over: must never write again
        self.started: set[str] = set()  # ran once (its one-time flags are behind it)
        self.wrote: set[str] = set()  # decided events of its own (a query that ran over no new event did not)
        self.flags: dict[str, tuple[str, ...]] = {}  # one-time flags of a query's first start
        self.checkpoint: dict[str, Path] = {}
        self.older: dict[str, Path] = {}  # a copy of the query's checkpoint after its first run
        self.journal: list[str] = []
        self.outputs: Outputs | None = None

    # --- the model's bookkeeping -------------------------------------------------------------------------------

    def note(self, act: str, result: Outcome | str) -> None:
        self.journal.append(f"{act} -> {result}")

    def read(self) -> Outputs:
        topics = self.pipeline.topics
        return read_outputs(
            self.bootstrap, topics.input, topics.decisions, topics.outbox, self.pipeline.shadow_decisions
        )

    def drained(self, query: str) -> None:
        """``query`` owns the output and drained the input: every event produced so far must be decided."""
        decided = frozenset(e for e in self.read().events if e not in self.excluded)
        if decided - self.must_decide:
            self.wrote.add(query)
        self.owner, self.must_decide = query, decided
        self.started.add(query)

    def expect(self, act: str, result: Outcome, allowed: set[str], before: Outputs | None = None) -> None:
        """``result`` must be one of ``allowed``; a refused act must leave every output as it was."""
        self.note(act, result)
        assert result.kind != FAILED, f"{act}: the job failed\n{self.story()}"
        assert result.kind in allowed, f"{act}: {result} where the model allows {sorted(allowed)}\n{self.story()}"
        if result.kind == REFUSED and before is not None:
            after = self.read()
            assert after.raw_live == before.raw_live, f"{act}: refused, yet the live output changed\n{self.story()}"

    def show(self, flags: tuple[str, ...]) -> str:
        """``flags`` as the journal prints them: query names and model versions, not generated names and paths."""
        short = {full: q for q, full in self.names.items()} | {p: m for m, p in self.models.items() if p}
        return " ".join(short.get(f, f) for f in flags)

    def story(self) -> str:
        return "acts so far:\n  " + "\n  ".join(self.journal)

    def model_flag(self, model: str) -> tuple[str, ...]:
        path = self.models[model]
        return ("--model", path) if path else ()

    def checkpoint_of(self, query: str, which: str) -> Path:
        if which == "older" and query in self.older:
            return self.older[query]
        if which == "same" and query in self.checkpoint:
            return self.checkpoint[query]
        return fresh_checkpoint(self.pipeline, query)

    def keep_checkpoint(self, query: str, checkpoint: Path) -> None:
        self.checkpoint[query] = checkpoint
        if query not in self.older and checkpoint.exists():
            self.older[query] = fresh_checkpoint(self.pipeline, query)
            shutil.copytree(checkpoint, self.older[query])

    # --- the acts -------------------------------------------------------------------------------------------------

    def may(self, act: str) -> bool:
        return act not in self.skipped

    @precondition(lambda self: self.produced < len(self.pool))
    @rule()
    def produce(self) -> None:
        """New events on the input (a chunk of the pool, on their keys' partitions)."""
        chunk = self.pool[self.produced : self.produced + CHUNK]
        self.pipeline.produce(chunk)
        self.produced += len(chunk)
        self.note("produce", f"{len(chunk)} events ({self.produced} in all)")

    @precondition(
        lambda self: self.may("run") and self.produced > 0
    )  # on an empty input nothing is decided, nor owned, by a run
    @rule(query=st.sampled_from(LIVE), which=st.sampled_from(CHECKPOINTS), model=st.sampled_from(("v1", "v2")),
          again=st.booleans())  # fmt: skip
    def run(self, query: str, which: str, model: str, again: bool) -> None:
        """Run a live query to the end (availableNow) with the usual arguments, or its one-time flags again; its
        checkpoint the same, a fresh one or an older copy; the shipped model or a new one (a cutover)."""
        flags = (*self.model_flag(model), *(self.flags.get(query, ()) if again else ()))
        checkpoint = self.checkpoint_of(query, which)
        safe = query not in self.retired and self.owner in ("", query)
        before = self.read()
        act = f"run {query} ({which} checkpoint) {self.show(flags)}".rstrip()
        result = run_to_end(self.pipeline, self.names[query], checkpoint, *flags)
        self.expect(act, result, {RAN} if safe else {REFUSED}, before)
        if result.kind == RAN:
            self.keep_checkpoint(query, checkpoint)
            self.drained(query)

    @precondition(lambda self: self.may("start_two_together") and not self.owner and not self.started
                  and self.produced == 0)  # fmt: skip
    @rule(models=st.sampled_from((("v1", "v2"), ("v1", "v1"))))
    def start_two_together(self, models: tuple[str, str]) -> None:
        """Two new queries over the same fresh topics (two deploys racing), both started before either commits:
        exactly one may run, the other must be refused."""
        starts = [(self.names[q], fresh_checkpoint(self.pipeline, q), self.model_flag(m))
                  for q, m in zip(("a", "b"), models, strict=True)]  # fmt: skip
        chunk = self.pool[self.produced : self.produced + CHUNK]
        results = start_together(self.pipeline, starts, chunk)
        self.produced += len(chunk)
        self.note(f"start a and b together, then produce {len(chunk)} events", ", ".join(map(str, results)))
        for (query, (_, checkpoint, _)), result in zip(zip(("a", "b"), starts, strict=True), results, strict=True):
            self.expect(f"start {query} together", result, {RAN, REFUSED})
            if result.kind == RAN:
                self.keep_checkpoint(query, checkpoint)
                self.drained(query)  # both running: the invariant finds every event decided twice
        assert any(r.kind == RAN for r in results), f"both queries were refused\n{self.story()}"

    @precondition(lambda self: self.may("start_at_offsets") and not self.owner and not self.started
                  and self.produced > 0)  # fmt: skip
    @rule(query=st.sampled_from(LIVE))
    def start_at_offsets(self, query: str) -> None:
        """A new query told to write only from the input's current end (``--start-offsets``): the events below
        were decided elsewhere and must never be decided here, whatever restarts follow."""
        ends = {p: 0 for p in range(2)}
        before = self.read()
        for partition, offset in before.events.values():
            ends[partition] = max(ends[partition], offset + 1)
        flags = ("--start-offsets", ",".join(f"{p}:{o}" for p, o in sorted(ends.items())))
        checkpoint = self.checkpoint_of(query, "fresh")
        result = run_to_end(self.pipeline, self.names[query], checkpoint, *flags)
        self.expect(f"run {query} (fresh checkpoint) {self.show(flags)}", result, {RAN}, before)
        if result.kind == RAN:
            self.flags[query] = flags
            self.excluded = frozenset(before.events)
            self.keep_checkpoint(query, checkpoint)
            self.drained(query)

    @precondition(lambda self: self.may("hand_over") and bool(self.owner) and any(q not in self.started for q in LIVE))
    @rule(model=st.sampled_from(("v1", "v2")))
    def hand_over(self, model: str) -> None:
        """A new query continues the owner's output (``--after-query``): the owner is fenced for good. From an
        owner that wrote nothing of its own it may also be refused (there is nothing to hand over from)."""
        query = next(q for q in LIVE if q not in self.started)
        flags = ("--after-query", self.names[self.owner], *self.model_flag(model))
        checkpoint, before = self.checkpoint_of(query, "fresh"), self.read()
        result = run_to_end(self.pipeline, self.names[query], checkpoint, *flags)
        allowed = {RAN} if self.owner in self.wrote else {RAN, REFUSED}
        self.expect(f"run {query} (fresh checkpoint) {self.show(flags)}", result, allowed, before)
        if result.kind == REFUSED:
            return
        self.retired.add(self.owner)
        self.flags[query] = flags[:2]
        self.keep_checkpoint(query, checkpoint)
        self.drained(query)

    @precondition(lambda self: self.may("shadow"))
    @rule(after=st.booleans(), model=st.sampled_from(("v1", "v2")))
    def shadow(self, after: bool, model: str) -> None:
        """A candidate model in shadow (``--shadow``), maybe with ``--after-query <owner>``: that may be refused, or
        run into the shadow's own topics; the live output must not change, and the live query must go on as before."""
        handover = ("--after-query", self.names[self.owner]) if after and self.owner else ()
        flags = ("--shadow", *self.model_flag(model), *handover)
        checkpoint, before = self.checkpoint_of("s", "same"), self.read()
        result = run_to_end(self.pipeline, self.names["s"], checkpoint, *flags)
        act = f"run s {self.show(flags)}"
        self.expect(act, result, {RAN, REFUSED} if handover else {RAN})
        assert self.read().raw_live == before.raw_live, f"{act}: a shadow changed the live output\n{self.story()}"
        if result.kind == RAN:
            self.keep_checkpoint("s", checkpoint)

    @precondition(lambda self: self.may("kill_owner_after_a_batch") and bool(self.owner)
                  and self.produced - len(self.must_decide | self.excluded) > CRASH_BATCH)  # fmt: skip
    @rule()
    def kill_owner_after_a_batch(self) -> None:
        """kill -9 of the owner right after its first micro-batch reached Kafka, before Spark checkpointed it."""
        flags = ("--max-offsets-per-trigger", str(CRASH_BATCH), "--crash-after-batch", "0")
        result = run_to_end(self.pipeline, self.names[self.owner], self.checkpoint_of(self.owner, "same"), *flags)
        self.expect(f"run {self.owner} (same checkpoint) {self.show(flags)}", result, {KILLED})

    def teardown(self) -> None:
        """Each example's acts and outcomes on stderr (pytest shows them with a failure, or with ``-s``)."""
        sys.stderr.write(f"explorer example: {self.story()}\n")

    # --- the judge ------------------------------------------------------------------------------------------------

    @invariant()
    def outputs_hold(self) -> None:
        """After every act: what a read_committed reader sees keeps every rule of ``output_checker``."""
        found = violations(self.read(), Expected(self.must_decide, self.excluded))
        assert not found, "the outputs break the rules:\n  " + "\n  ".join(found) + "\n" + self.story()

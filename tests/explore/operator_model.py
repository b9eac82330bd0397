"""The model of operator acts: what an operator may do to the infer job, and what must hold after each act.

``OperatorActs`` is a hypothesis ``RuleBasedStateMachine``. Its rules are acts on the real stack
(``operator_acts``); its state is the model: which query owns the live output, which queries
handed over or were taken over (retired), which one-time flags each query was first started
with, which events must by now have one live decision and which the operator excluded, which events
were on an input topic deleted since, and how many partitions the layout has. Each act
says, before it runs, whether it is safe (it must run) or unsafe (it must be refused, and then
change nothing a reader sees); a few acts may go either way. Two acts change the topics, then do what
the job's refusal says (``follow``): recreating the input, adding partitions. After every act the invariant reads
every output topic read_committed (``output_checker``) and holds it against the model.

The class attributes (``cluster``, ``folder``, ``models``, ``pool``) are set by the test that
runs the machine; each example builds its own topics and query names.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import unique
from tests.explore.operator_acts import (
    FAILED,
    KILLED,
    PARTITIONS,
    RAN,
    REFUSED,
    Outcome,
    Pipeline,
    fix_command,
    fresh_checkpoint,
    run_to_end,
    start_together,
)
from tests.explore.output_checker import Expected, Outputs, read_outputs, violations

LIVE = ("a", "b", "c")  # live query names (each example suffixes them)
OWNER = "owner"  # a run's query: whichever owns the live output now (a, b, c, or the query a growth started)
CHECKPOINTS = ("same", "fresh", "older")
CHUNK = 20  # events per produce act
CRASH_BATCH = 10  # --max-offsets-per-trigger of the kill -9 act: its first batch covers part of the backlog
MAX_PARTITIONS = 4  # the add-partitions act grows the layout by one, up to this
COSTLY = frozenset({"recreate_input", "add_partitions"})  # acts of several job runs each: the soak's
FOLLOWED = ("--input-recreated", "--after-query")  # a refusal after a topic change names one of these


def recreated(outputs: Outputs, must_decide: frozenset[str], earlier: frozenset[str]) -> tuple[frozenset[str], ...]:
    """The model after the input was deleted and created again, from what a reader saw just before. Pure.

    Every event of the deleted topic is ``earlier``: nothing can read it any more, so none of them
    can get a decision from now on. The live decisions they got stay, and must stay: they join the
    events that must be decided. The new topic's events are new events, each needing one decision.
    """
    decided = frozenset(str(d["event_id"]) for d in outputs.decisions)
    return must_decide | decided, earlier | frozenset(outputs.events)


def settled(
    outputs: Outputs, excluded: frozenset[str], must_decide: frozenset[str], earlier: frozenset[str]
) -> frozenset[str]:
    """What must be decided once the owner drained the input: each event on it that is not excluded, and every
    decision an earlier input topic got. Pure."""
    return frozenset(e for e in outputs.events if e not in excluded) | (must_decide & earlier)


class OperatorActs(RuleBasedStateMachine):
    cluster: ClassVar[KafkaContext]
    folder: ClassVar[Path]
    models: ClassVar[dict[str, str]]  # "v1"/"v2" -> model artifact path ("" for the shipped model)
    pool: ClassVar[list[dict[str, object]]]  # the events produce acts take from, in order
    skipped: ClassVar[frozenset[str]] = frozenset()  # acts left out (a soak exploring past a known finding)

    def __init__(self) -> None:
        super().__init__()
        self.pipeline = Pipeline.create(self.cluster, self.folder / unique("example"))
        self.names = {q: unique(q) for q in (*LIVE, "s")}
        self.produced = 0
        self.must_decide: frozenset[str] = frozenset()
        self.excluded: frozenset[str] = frozenset()
        self.earlier: frozenset[str] = frozenset()  # events of an input topic deleted since
        self.partitions = PARTITIONS  # of every topic of the layout
        self.moved_shadow = False  # the shadow query ran before the topics changed: it may be refused, with a fix
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
        return read_outputs(self.cluster, topics.input, topics.decisions, topics.outbox, self.pipeline.shadow_decisions)

    def drained(self, query: str) -> None:
        """``query`` owns the output and drained the input: every event produced so far must be decided."""
        decided = settled(self.read(), self.excluded, self.must_decide, self.earlier)
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

    def chunk(self) -> list[dict[str, object]]:
        """The pool's next events, counted as produced."""
        events = self.pool[self.produced : self.produced + CHUNK]
        self.produced += len(events)
        return events

    def follow(self, query: str, refused: Outcome, flags: tuple[str, ...], *, renamed: bool = True) -> str:
        """Run what ``refused``'s fix says, as the operator reads it: ``query`` with its usual ``flags`` and every
        flag the fix names, on a fresh checkpoint if it says so, as the query it names if it names one (the model's
        ``<query>-p<N>``, or the same key when not ``renamed``). It must run. Returns the query's key."""
        fix = fix_command(refused.line)
        named = any(fix.value(flag) for flag in FOLLOWED)
        assert named, f"{query}: the refusal names no command to run: {refused.line}\n{self.story()}"
        if fix.value("--query"):
            query = f"{query}-p{self.partitions}" if renamed else query
            self.names[query] = fix.value("--query")
        own = tuple(f for i in range(0, len(fix.flags), 2) if fix.flags[i] != "--query" for f in fix.flags[i : i + 2])
        checkpoint = self.checkpoint_of(query, "fresh" if fix.fresh_checkpoint else "same")
        before = self.read()
        result = run_to_end(self.pipeline, self.names[query], checkpoint, *flags, *own)
        self.expect(f"run {query} as the fix says {self.show((*flags, *own))}", result, {RAN}, before)
        self.flags[query] = (*self.flags.get(query, ()), *own)
        self.older.pop(query, None)  # a copy from before the topics changed holds the old topics' offsets
        self.keep_checkpoint(query, checkpoint)
        return query

    @precondition(lambda self: self.produced < len(self.pool))
    @rule()
    def produce(self) -> None:
        """New events on the input (a chunk of the pool, on their keys' partitions)."""
        chunk = self.chunk()
        self.pipeline.produce(chunk, self.partitions)
        self.note("produce", f"{len(chunk)} events ({self.produced} in all)")

    @precondition(
        lambda self: self.may("run") and self.produced > 0
    )  # on an empty input nothing is decided, nor owned, by a run
    @rule(query=st.sampled_from((OWNER, *LIVE)), which=st.sampled_from(CHECKPOINTS),
          model=st.sampled_from(("v1", "v2")), again=st.booleans())  # fmt: skip
    def run(self, query: str, which: str, model: str, again: bool) -> None:
        """Run a live query to the end (availableNow) with the usual arguments, or its one-time flags again; its
        checkpoint the same, a fresh one or an older copy; the shipped model or a new one (a cutover). The query:
        a, b, c, or whichever owns the output now (a when none does)."""
        query = (self.owner or LIVE[0]) if query == OWNER else query
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
        ends = {p: 0 for p in range(self.partitions)}
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
        self.expect(act, result, {RAN, REFUSED} if handover or self.moved_shadow else {RAN})
        if result.kind == RAN:
            self.keep_checkpoint("s", checkpoint)
        elif self.moved_shadow and not handover:  # the topics changed since s last ran: do what its refusal says
            self.follow("s", result, flags, renamed=False)
        self.moved_shadow = self.moved_shadow and result.kind == REFUSED and bool(handover)
        assert self.read().raw_live == before.raw_live, f"{act}: a shadow changed the live output\n{self.story()}"

    @precondition(lambda self: self.may("shadow") and self.may("shadow_after_the_owner") and bool(self.owner))
    @rule(model=st.sampled_from(("v1", "v2")))
    def shadow_after_the_owner(self, model: str) -> None:
        """The shadow act with ``--after-query <owner>``: a shadow beside a live owner, its own rule so that random
        sequences try it as often as a plain shadow once a query owns the output."""
        self.shadow(True, model)

    @precondition(lambda self: self.may("recreate_input") and bool(self.owner) and self.produced < len(self.pool))
    @rule(model=st.sampled_from(("v1", "v2")))
    def recreate_input(self, model: str) -> None:
        """The input deleted and created again, new events on it, then the owner restarted as usual: refused, since
        its offsets are of the old topic; then run as the refusal's fix says (``--input-recreated <id>``, a fresh
        checkpoint). The old topic's decisions stay; each new event gets one."""
        self.must_decide, self.earlier = recreated(self.read(), self.must_decide, self.earlier)
        self.pipeline.recreate_input(self.partitions)
        chunk = self.chunk()
        self.pipeline.produce(chunk, self.partitions)
        self.note("delete and create the input again, produce", f"{len(chunk)} events ({self.produced} in all)")
        self.moved_shadow = "s" in self.checkpoint
        self.older.clear()  # every copy holds the old topic's offsets
        self.restart_as_told(model)

    @precondition(lambda self: self.may("add_partitions") and bool(self.owner) and self.partitions < MAX_PARTITIONS)
    @rule(model=st.sampled_from(("v1", "v2")))
    def add_partitions(self, model: str) -> None:
        """Every topic of the layout grown by one partition, new events if the pool has some, then the owner
        restarted as usual: refused, with the command of a new query that continues it (``--query X --after-query
        Y``, maybe ``--start-offsets``); run exactly that. The new query owns the output; the old one is retired."""
        self.partitions += 1
        self.pipeline.grow(self.partitions)
        chunk = self.chunk()
        self.pipeline.produce(chunk, self.partitions)
        self.note(f"grow every topic to {self.partitions} partitions, produce", f"{len(chunk)} events")
        self.moved_shadow = "s" in self.checkpoint
        old = self.owner
        self.restart_as_told(model)
        assert self.owner != old, f"the growth's fix names no new query\n{self.story()}"
        self.retired.add(old)

    def restart_as_told(self, model: str) -> None:
        """The owner restarted with its usual arguments and checkpoint after a change of its topics: it must be
        refused, changing nothing; then what the refusal's fix says must run, and drain the input."""
        flags, before = self.model_flag(model), self.read()
        checkpoint = self.checkpoint_of(self.owner, "same")
        result = run_to_end(self.pipeline, self.names[self.owner], checkpoint, *flags)
        self.expect(f"run {self.owner} (same checkpoint) {self.show(flags)}".rstrip(), result, {REFUSED}, before)
        self.drained(self.follow(self.owner, result, flags))

    @precondition(lambda self: self.may("kill_owner_after_a_batch") and bool(self.owner)
                  and self.produced - len(self.must_decide | self.excluded | self.earlier) > CRASH_BATCH)  # fmt: skip
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
        found = violations(self.read(), Expected(self.must_decide, self.excluded, self.earlier))
        assert not found, "the outputs break the rules:\n  " + "\n  ".join(found) + "\n" + self.story()

"""``ikkai demo``: the whole platform end to end on its own embedded stack, then a replay. The I/O shell.

Steps (each narrated on stderr; stdout gets only the report):

1. set up (as ``ikkai setup``), start a fresh embedded stack in ``$IKKAI_HOME/demo`` (``spark_workers``:
   with a Spark standalone cluster, the live jobs submitted to it; ``connect_workers``: a Connect group);
2. create the topics, publish master data, start the enrich and infer jobs (continuous) and
   the reference receiver as their own processes, apply the ``payments-ingest`` and
   ``outbox-sink`` bundles through the control plane (plan shown, then applied);
3. append a seeded mixed day of raw payments (``demo.raw_payments``) to the file the
   ingestion connector reads, and follow four stages until everything is delivered, with
   SIGKILL of the infer job and a crash-restart of the Connect worker midway (``chaos``);
4. read every topic with read_committed consumers and the receiver's database into ``Facts``;
5. replay: both jobs again from the beginning of their input into fresh ``*.replay`` topics
   with fresh checkpoints, and compare digests. Each replay starts as soon as its input topic is
   complete (every line written, every chaos action recovered, every line ingested, resp.
   enriched), so it runs while the live pipeline decides and delivers its last records; on
   ``local[2]`` as a second query of the running live job, on a cluster as a process (``demo.replays``);
6. stop what it started (unless ``keep``); a live job is stopped once nothing is left for it.

Every step is timed (``demo.phases``): the report's PHASES table says where the time went.

Why its own stack: the demo kills the infer job and the Connect worker on purpose and needs
empty topics for a reproducible report, so it never touches ``ikkai stack up``'s stack or a
cluster named by IKKAI_BOOTSTRAP_SERVERS / IKKAI_CONNECT_URL.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import psutil

from demo import chaos as chaos_
from demo import client_logs
from demo.children import CLUSTER_VARS, Child, DemoProcessError, child_env, wait_for_http
from demo.collect import decoded, read_live, read_topics, receipt_identity, receiver_applied, receiver_deliveries
from demo.facts import LIVE_TOPICS, REPLAYED, ChaosEvent, Expectation, Facts, replay_topic
from demo.follow import Look, stop_following
from demo.lineup import CLUSTER_JOB_SETTINGS, Lineup, spark_defaults
from demo.live_page import LivePage
from demo.phases import PhaseClock
from demo.progress import LineWriter, ProgressDisplay, StageProgress, stack_line
from demo.raw_input import demo_input
from demo.replays import Replays
from demo.report import build_report
from demo.stages import PipelineCounts
from demo.topics import RecordCounter
from deploy import bundle_ops
from deploy.bundle_output import plan_text
from deploy.connect_rest import ConnectClient, ConnectRestError
from ikkai.contract.ids import application_name
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import (
    DECISIONS_FRAUD,
    DLQ_ENRICH,
    DLQ_INFER,
    EVENTS_PAYMENTS,
    INGEST_PAYMENTS,
    OUTBOX_RECEIPTS,
)
from ikkai.errors import IkkaiError
from ikkai.settings import Endpoints, endpoints_connect_auth, ikkai_home, jars_dir
from stack import attached
from stack.kit.chaos import ChaosStack, executor_jvms
from stack.local_stack import CONNECT
from stack.ports import free_port
from stack.probes import broker_answers
from stack.shape import StackOptions
from stack.spark_cluster import SPARK_MASTER, shared_dir

POLL_S = 0.5  # the follow loop's look at the topics; drained = follow.STABLE_POLLS looks in a row


@dataclass(frozen=True)
class DemoOptions:
    size: int = 1000  # payments; the raw stream adds duplicates, updates, late and bad lines
    seed: int = 7
    chaos: bool = True
    keep: bool = False
    partitions: int = 2
    write_seconds: float = 20.0  # spread the raw lines over this long
    idle_timeout_s: float = 300.0  # give up when no stage moved for this long
    job_timeout_s: float = 900.0  # a replay job must finish within this
    home: Path | None = None  # default: $IKKAI_HOME/demo
    brokers: int = 1  # KRaft nodes of the demo's stack; 3 for broker kills
    kills: tuple[tuple[str, int], ...] = ()  # (chaos kind, times): a soak instead of the two default actions
    spark_workers: int = 0  # a Spark standalone master and this many workers; the live jobs run there (0: local[2])
    connect_workers: int = 1  # Kafka Connect workers in the stack's group

    @property
    def stack_options(self) -> StackOptions:
        """The demo's stack: a fresh home, so every other knob is a new home's default."""
        return StackOptions(
            brokers=self.brokers, spark_workers=self.spark_workers, connect_workers=self.connect_workers
        )

    @property
    def plan(self) -> chaos_.ChaosPlan | chaos_.SoakPlan | None:
        if not self.chaos:
            return None
        return chaos_.SoakPlan(dict(self.kills)) if self.kills else chaos_.ChaosPlan()


class DemoStalled(IkkaiError):
    """The pipeline stopped moving before everything was delivered."""


class Demo:
    def __init__(self, options: DemoOptions, stream: TextIO = sys.stderr) -> None:
        self.options = options
        self.display = ProgressDisplay(stream)
        self._lock = threading.Lock()
        self.home = (options.home or ikkai_home()) / "demo"
        self.run_dir = self.home / "run"
        progress = LineWriter(self.say)
        self.stack = ChaosStack(self.home, jars_dir(), options.stack_options, progress=progress)  # type: ignore[arg-type]
        self.plan = options.plan
        self.children: dict[str, Child] = {}
        self.chaos_events: list[ChaosEvent] = []
        self.seconds: dict[str, float] = {}
        self.endpoints: Endpoints | None = None
        self.receiver_url = ""
        self.held_back: dict[str, int] = {}
        self.flowing = threading.Event()  # decisions were seen: the writer's first gate
        self.actions: dict[str, threading.Thread] = {}  # chaos action → the thread carrying it out
        self.counts: dict[str, int] = {}  # committed records per topic, as the follow loop last saw them
        self.last_broker_killed = ""
        self._stack_thread: threading.Thread | None = None
        self._stack_error: BaseException | None = None
        self._stack_is_ready = False
        self.clock = PhaseClock()
        self.replays = Replays(self.clock, self.say, self._lineup, self._start, lambda name: self.children[name],
                               self._retire)  # fmt: skip
        self.retired: set[str] = set()  # live jobs stopped on purpose: nothing was left for them
        self._stoppers: list[threading.Thread] = []
        self.page: LivePage | None = None  # the operator page on the demo's stack, once the stack is up

    def say(self, message: str) -> None:
        with self._lock:
            self.display.say(message)

    # -- the steps -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        try:
            facts = self._run()
        finally:
            with self.clock.phase("stop"):
                self._stop()
        self.seconds["total"] = self.clock.since_origin()
        return build_report(dataclasses.replace(facts, seconds=dict(self.seconds), phases=tuple(self.clock.phases())))

    def _run(self) -> Facts:
        from demo.payments_simulation import DAY_MS
        from demo.raw_payments import mixed_stream

        o = self.options
        started = self.clock.origin
        with self.clock.phase("setup"):
            self._setup()
        self.seconds["setup"] = time.monotonic() - started
        try:
            stream = mixed_stream(
                o.seed, payments=o.size, partitions=o.partitions, step_ms=max(2_000, DAY_MS // o.size)
            )
        except ValueError as exc:  # too few payments to hold every kind of bad line
            raise IkkaiError(
                f"--size {o.size} --seed {o.seed}: {exc}", fix="pass a larger --size (200 or more)"
            ) from exc
        given = demo_input(stream.lines)
        lines, expectation = given.lines, given.expectation
        self.held_back = given.held_back
        dead = sum((expectation.dead_letters or {}).values())
        self.say(
            f"raw stream: seed {o.seed}, {o.size} payments as {len(lines)} lines for the file connector "
            f"({expectation.events} valid events, {dead} to be dead-lettered); held back "
            + (", ".join(f"{k} {v}" for k, v in given.held_back.items()) or "none")
            + " (lines a file cannot carry as generated)"
        )
        self._stack_up()
        with self.clock.phase("topics, master data"):
            self._topics_and_master_data(stream)
        if o.spark_workers:  # the jobs go to the Spark master, which starts after the Connect workers
            self._stack_ready()
        self._start_jobs()
        with self.clock.phase("receiver"):
            self._start_receiver()
        self._stack_ready()
        self.seconds["stack"] = time.monotonic() - started - self.seconds["setup"]
        self._open_page()
        with self.clock.phase("connectors applied"):
            self._apply_bundles()
        pipeline_started = time.monotonic()
        self._follow(lines, expectation)
        self.seconds["pipeline"] = time.monotonic() - pipeline_started
        assert self.endpoints is not None
        self.replays.start()  # those the follow loop did not start (an input never completed)
        self.replays.nothing_left("infer")
        with self.clock.phase("read topics"):
            self.say("reading every topic with read_committed consumers (the replay runs meanwhile)")
            topics = read_live(self.cluster)
            applied = receiver_applied(self.run_dir / "receiver.sqlite")
            deliveries = receiver_deliveries(self.receiver_url)
        replay = self._replay()
        self.seconds["replay"] = time.monotonic() - self.replays.first_started  # overlaps the pipeline
        return Facts(
            seed=o.seed, size=o.size, raw_lines=lines, expectation=expectation, topics=topics, **decoded(topics),
            held_back=self.held_back, applied=applied, deliveries=deliveries, replay=replay,
            chaos=sorted(self.chaos_events, key=lambda e: e.at_seconds),
            chaos_planned=self.plan.actions if self.plan else (),
            page_answers=self.page.answers() if self.page is not None else None,
        )  # fmt: skip

    def _setup(self) -> None:
        from stack.artifacts import ensure_jars
        from stack.local_plugins import ensure_local_plugins
        from stack.prerequisites import check_java, check_maven

        java = check_java()
        check_maven()
        progress = LineWriter(self.say)
        ensure_jars(jars_dir(), progress=progress)  # type: ignore[arg-type]
        ensure_local_plugins(jars_dir(), progress=progress)  # type: ignore[arg-type]
        self.say(f"setup: java {java.version}, jars and Connect plugins in {jars_dir()}")

    def _stack_up(self) -> None:
        """Start the stack in the background; return once the broker answers (Connect may still be starting)."""
        if any(os.environ.get(name) for name in CLUSTER_VARS):
            self.say(
                "note: the demo ignores IKKAI_BOOTSTRAP_SERVERS / IKKAI_CONNECT_URL; it kills and restarts what "
                "it runs, so it always uses its own embedded stack"
            )
        self.say(f"starting a fresh embedded stack in {self.home}")
        self.clock.start("broker")
        self.stack.down(purge=True)
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        (self.run_dir / "drop").mkdir(parents=True)
        self.say(f"Kafka clients' log lines: {client_logs.kept_in(self.run_dir)}")
        if self.options.spark_workers:
            (self.run_dir / "spark-conf").mkdir()
            (self.run_dir / "spark-conf" / "spark-defaults.conf").write_text(spark_defaults(CLUSTER_JOB_SETTINGS))
        self._stack_thread = threading.Thread(target=self._stack_up_in_background, name="demo-stack", daemon=True)
        self._stack_thread.start()
        while self._stack_thread.is_alive():
            endpoints = self.stack.endpoints()
            if endpoints is not None and broker_answers(KafkaContext(endpoints.bootstrap_servers)):
                self.endpoints = endpoints
                self.clock.end("broker")
                self.clock.start("connect worker")
                return
            time.sleep(0.5)
        self._stack_ready()

    @property
    def cluster(self) -> KafkaContext:
        """The demo's own stack's Kafka cluster (plaintext), as its endpoints name it: every client of the demo's."""
        assert self.endpoints is not None
        return KafkaContext(self.endpoints.bootstrap_servers)

    def _stack_up_in_background(self) -> None:
        try:
            self.endpoints = self.stack.up()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread by _stack_ready
            self._stack_error = exc

    def _stack_ready(self) -> None:
        """Wait for the whole stack (the Connect worker too); its start-up error, if any, is raised here."""
        if self._stack_is_ready:
            return
        assert self._stack_thread is not None
        self._stack_thread.join()
        if self._stack_error is not None:
            raise self._stack_error
        assert self.endpoints is not None
        self.clock.end("connect worker")
        self._stack_is_ready = True
        self.say(stack_line(self.endpoints.bootstrap_servers, self.stack.connect_urls(), self.stack.spark_master_url(),
                            self.options.spark_workers, tuple(self.stack.spark_ui_urls())))  # fmt: skip

    def _topics_and_master_data(self, stream: Any) -> None:
        from demo.raw_payments import write_master_data
        from ikkai.contract.kafka import ensure_topics
        from outbox_sink.topics import create_outbox_topics

        assert self.endpoints is not None
        cluster = self.cluster
        p = self.options.partitions
        ensure_topics(cluster, [INGEST_PAYMENTS, EVENTS_PAYMENTS, DLQ_ENRICH, DECISIONS_FRAUD, DLQ_INFER], p)
        ensure_topics(cluster, [replay_topic(t) for t in REPLAYED], p)
        create_outbox_topics(cluster, partitions=p)
        count = write_master_data(cluster, stream.world, self.options.seed)
        self.say(f"topics created ({p} partitions each); {count} master-data profile versions published")

    def _lineup(self) -> Lineup:
        assert self.endpoints is not None
        master = self.stack.spark_master_url() if self.options.spark_workers else None
        return Lineup(
            self.run_dir, self.endpoints.bootstrap_servers, self.endpoints.connect_url, self.options.partitions,
            batch=max(100, self.options.size // 5), master=master,
            shared=shared_dir(self.stack.home) if master else None,
        )  # fmt: skip

    def _start(self, job: tuple[str, list[str]]) -> Child:
        name, command = job
        env = child_env(self.home, jars_dir())
        if self.options.spark_workers:  # read by spark-submit: the live jobs' settings on the cluster
            env["SPARK_CONF_DIR"] = str(self.run_dir / "spark-conf")
        child = self.children[name] = Child(name, command, self._lineup().log(name), env)
        return child

    def _start_jobs(self) -> None:
        enrich, infer = self._start(self._lineup().enrich()), self._start(self._lineup().infer())
        for name, child in (("enrich", enrich), ("infer", infer)):
            self._time_start_up(name, child)
        self.say(f"started enrich (pid {enrich.pid}) and infer (pid {infer.pid}), logs in {self.run_dir / 'logs'}")

    def _time_start_up(self, name: str, child: Child) -> None:
        """Phase '<name> start-up': from the spawn until the job prints its first line (its session is up)."""
        phase = f"{name} start-up"
        self.clock.start(phase)

        def watch() -> None:
            if child.wait_for_output(f"{name}: ", self.options.idle_timeout_s):
                self.clock.end(phase)

        threading.Thread(target=watch, name=f"demo-{name}-start-up", daemon=True).start()

    def _start_receiver(self) -> None:
        port = free_port()
        receiver = self._start(("receiver", self._lineup().receiver(port)))
        self.receiver_url = f"http://127.0.0.1:{port}"
        wait_for_http(receiver, f"{self.receiver_url}/_ikkai/applied")
        self.say(f"reference receiver on {self.receiver_url} (pid {receiver.pid})")

    def _open_page(self) -> None:
        assert self.endpoints is not None
        self.page = LivePage(self.run_dir, self.endpoints)
        url = self.page.start()
        self.say(f"watch it live: {url} (log in with the token in {self.page.token_file})")

    def _apply_bundles(self) -> None:
        for name in ("payments.jsonl", "refunds.jsonl"):
            (self.run_dir / "drop" / name).touch()
        (self.run_dir / "plans").mkdir(exist_ok=True)
        clusters = self.page.clusters_file if self.page is not None else None  # names the demo's stack
        for request in self._lineup().bundles(self.receiver_url, clusters):
            if self.page is not None:
                self.page.renders_as(request)  # its plans carry the demo's overrides: in sync once applied
            plan = plan_text(bundle_ops.plan_data(request))
            full = self.run_dir / "plans" / f"{request.bundle}.txt"
            full.write_text(plan + "\n")
            compact = [line for line in plan.splitlines() if not line.startswith("      ")]
            self.say("\n".join(compact) + f"\n  (every setting and change: {full})")
            applied = bundle_ops.apply_data(request)
            states = ", ".join(f"{n} {s}" for n, s in sorted(applied["states"].items()))
            self.say(f"apply: {len(applied['written'])} connector(s) written; {states}")
            if applied.get("record_warning"):
                self.say(str(applied["record_warning"]))

    # -- following the pipeline ----------------------------------------------------------------

    def _may_write(self, written: float) -> bool:
        """Whether the writer, having written this share of the lines, may go on (the plan's gates)."""
        if self.plan is None:
            return chaos_.gate_before(written, chaos=False) is None or self.flowing.is_set()
        with self._lock:
            started, finished = set(self.actions), {e.action for e in self.chaos_events}
        return self.plan.may_write(written, self.flowing.is_set(), started, finished)

    def _write_lines(self, lines: list[bytes], stop: threading.Event) -> None:
        with self.clock.phase("writing raw lines"):
            self._write_chunks(lines, stop)

    def _write_chunks(self, lines: list[bytes], stop: threading.Event) -> None:
        """Append the lines in chunks, pausing where the chaos plan says (``_may_write``)."""
        chunks = max(1, min(40, len(lines) // 25))
        per_chunk = -(-len(lines) // chunks)
        pause = self.options.write_seconds / chunks
        with self._lineup().drop_file.open("ab") as out:
            for start in range(0, len(lines), per_chunk):
                while not self._may_write(start / len(lines)):
                    if stop.wait(0.5):
                        return
                out.write(b"".join(line + b"\n" for line in lines[start : start + per_chunk]))
                out.flush()
                if stop.wait(pause):
                    return

    def _follow(self, lines: list[bytes], expectation: Expectation) -> None:
        assert self.endpoints is not None
        pipeline = PipelineCounts(expectation, {})
        counter = RecordCounter(
            self.cluster,
            LIVE_TOPICS,
            distinct={OUTBOX_RECEIPTS: receipt_identity},  # a receipt repeated after the worker restart is not progress
        )
        stop = threading.Event()
        writer = threading.Thread(target=self._write_lines, args=(lines, stop), name="demo-writer", daemon=True)
        plan, actions = self.plan, self.actions
        self.say(f"writing {len(lines)} raw lines to {self._lineup().drop_file}: " + (
            f"a fifth now, the rest in step with {len(plan.actions)} chaos actions" if isinstance(plan, chaos_.SoakPlan)
            else "half now, more once decisions flow"
            + (", the last fifth after the Connect worker restart" if plan else "")
        ))  # fmt: skip
        self.first_line_at = time.monotonic()
        for stage in ("ingest", "enrich", "decide", "deliver"):
            self.clock.start(stage)
        writer.start()
        stable = 0
        last_change = time.monotonic()
        last_counts: dict[str, int] = {}
        last_health = 0.0
        try:
            while True:
                pipeline = PipelineCounts(expectation, counter.poll(POLL_S))
                if pipeline.counts.get(DECISIONS_FRAUD):
                    self.flowing.set()
                stages = pipeline.stages()
                for stage, phase in (("ingested", "ingest"), ("enriched", "enrich"), ("decided", "decide")):
                    if stages[stage].fraction >= 1 and not self.clock.ended(phase):
                        self.clock.end(phase)
                self.counts = dict(pipeline.counts)
                with self._lock:
                    self.display.update(list(stages.values()))
                if pipeline.counts != last_counts:
                    last_counts, last_change = dict(pipeline.counts), time.monotonic()
                running = {name for name, thread in actions.items() if thread.is_alive()}
                if plan is not None:
                    for due in plan.due(stages, set(actions), running):
                        at = time.monotonic() - self.first_line_at
                        thread = threading.Thread(target=self._chaos, args=(due, at, stages), daemon=True)
                        with self._lock:
                            actions[due] = thread
                        thread.start()
                        running.add(due)
                busy = bool(running)
                with self._lock:
                    settled = not busy and {e.action for e in self.chaos_events} >= set(plan.actions if plan else ())
                if settled and not writer.is_alive():  # every line written, every chaos action recovered
                    self.replays.start(pipeline.replay_inputs_complete())
                kinds = {chaos_.kind_of(action) for action in running}
                for name, kind in (("enrich", chaos_.KILL_ENRICH), ("infer", chaos_.KILL_INFER), ("receiver", "")):
                    if kind not in kinds and name not in self.retired:
                        self.children[name].check_alive()
                if not kinds & {chaos_.RESTART_WORKER, chaos_.KILL_BROKER} and time.monotonic() - last_health > 5:
                    self._check_connectors()
                    last_health = time.monotonic()
                stable = stable + 1 if pipeline.drained() and not busy and not writer.is_alive() else 0
                with self._lock:
                    look = Look(stable, time.monotonic() - last_change, running, tuple(self.chaos_events))
                verdict = stop_following(
                    look,
                    planned=plan.actions if plan else (),
                    idle_timeout_s=self.options.idle_timeout_s,
                )
                if verdict is not None:
                    if verdict.drained:
                        self.clock.end("deliver")
                    else:
                        self.say(verdict.reason)
                    break
        finally:
            stop.set()
            writer.join(30)
            counter.close()
            with self._lock:
                self.display.finish()

    def _check_connectors(self) -> None:
        assert self.endpoints is not None
        try:
            client = ConnectClient(self.endpoints.connect_url, auth=endpoints_connect_auth(self.endpoints))
            live = client.connectors_expanded()
        except (ConnectRestError, OSError):
            return  # a restarting worker; the next check sees it
        for name, data in live.items():
            for task in data.get("status", {}).get("tasks", []):
                if task.get("state") == "FAILED":
                    first = (task.get("trace") or "").strip().splitlines()[:1]
                    raise IkkaiError(
                        f"connector {name} task {task.get('id')} FAILED: {first[0] if first else 'no trace'}",
                        fix=f"see `ikkai bundle status <bundle> --connect-url {self.endpoints.connect_url}` "
                        f"and {self.stack.log_file(CONNECT)}",
                    )

    def _chaos(self, action: str, at: float, stages: dict[str, StageProgress]) -> None:
        where = chaos_.describe(stages)
        began = time.monotonic()
        recovered: float | None = None
        failure: str | None = None
        kind = chaos_.kind_of(action)
        try:
            if kind in (chaos_.KILL_INFER, chaos_.KILL_ENRICH):
                name = "infer" if kind == chaos_.KILL_INFER else "enrich"
                old = self.children[name]
                self.say(f"chaos: {action}: pid {old.pid} at {where}")
                old.kill()
                new = self._start(self._lineup().infer() if name == "infer" else self._lineup().enrich())
                self.say(f"chaos: {name} restarted (pid {new.pid}) on its checkpoint")
                self._wait_job_recovered(name, new)
                recovered = time.monotonic() - began
                self.say(f"chaos: {name} committed a batch again {recovered:.0f}s after the kill")
            elif kind == chaos_.KILL_BROKER:
                victim, role = self._broker_victim(action)
                self.say(f"chaos: {action}: {victim}, {role}, at {where}; then start it again")
                self.stack.kill(victim)
                self.stack.start(victim)
                self.stack.wait_in_sync(timeout=self.options.idle_timeout_s)
                recovered = time.monotonic() - began
                self.say(f"chaos: {victim} back, every partition in sync after {recovered:.0f}s")
            elif kind == chaos_.KILL_EXECUTOR:
                name = chaos_.executor_target(chaos_.number_of(action))
                job, executor = self.children[name], self._an_executor_of(name)
                since, began = job.log_size(), time.monotonic()
                self.say(f"chaos: {action}: {name}'s executor (pid {executor.pid}) at {where}")
                executor.kill()
                executor.wait(30)  # gone, not only signalled: a JVM still tearing down is no executor to count
                self._wait_job_recovered(name, job, since)
                recovered = time.monotonic() - began
                self.say(f"chaos: {name} at work again {recovered:.0f}s after its executor's kill")
            elif kind == chaos_.KILL_SPARK_WORKER:
                victim = chaos_.spark_worker_target(chaos_.number_of(action), self.options.spark_workers)
                jobs = {name: self.children[name] for name in chaos_.LIVE_JOBS}
                executors = {name: {e.pid for e in self.stack.executors_of(application_name(name))} for name in jobs}
                marks, began = {name: job.log_size() for name, job in jobs.items()}, time.monotonic()
                self.say(f"chaos: {action}: {victim} with its executors at {where}; then start it again")
                self.stack.kill(victim)
                alive = {e.pid for e in executor_jvms(self.stack)}
                lost = [name for name, pids in executors.items() if pids - alive] or ["no job"]
                self.stack.start(victim)  # returns once the master lists it ALIVE
                self.say(f"chaos: {victim} registered again after {time.monotonic() - began:.0f}s; it took "
                         f"{' and '.join(lost)}'s executor with it")  # fmt: skip
                for name, job in jobs.items():
                    self._wait_job_recovered(name, job, marks[name])
                recovered = time.monotonic() - began
                self.say(f"chaos: {victim} back and every live job at work again after {recovered:.0f}s")
            elif kind == chaos_.RESTART_WORKER:
                self.say(f"chaos: {action}: kill -9 the Connect worker at {where}, then start it again")
                self.stack.kill(CONNECT)
                self.stack.start(CONNECT)
                self._wait_connectors_running()
                recovered = time.monotonic() - began
                self.say(f"chaos: Connect worker back, connectors RUNNING after {recovered:.0f}s")
            if recovered is not None:
                self.clock.start(f"chaos: {action}", at=began)
                self.clock.end(f"chaos: {action}")
        except Exception as exc:  # noqa: BLE001 - whatever stopped the recovery, the report names it
            failure = str(exc) if isinstance(exc, IkkaiError) else f"{type(exc).__name__}: {exc}"
            self.say(f"chaos: {action} did not recover: {failure}")
        finally:
            with self._lock:  # _follow stops at once on an action that did not recover
                self.chaos_events.append(ChaosEvent(action, at, where, recovered, failure))

    def _wait_job_recovered(self, name: str, job: Child, since: int = 0) -> None:
        """Until the (restarted) job commits a batch (in its log past ``since``), or it runs its query and has
        caught up (``chaos.caught_up``) with, on a Spark cluster, an executor running.

        A job that is still working (its log grows: Spark reports each stage's progress) is given time: on a
        loaded machine the first batch after a restart may take longer than ``idle_timeout_s``. It fails when
        it has been silent for ``idle_timeout_s``, exits, or works for four times that without a batch.
        """
        idle, limit = self.options.idle_timeout_s, 4 * self.options.idle_timeout_s
        began = time.monotonic()
        while time.monotonic() - began < limit:
            if job.wait_for_output(f"{name}: batch", 2.0, since):
                return
            job.check_alive()
            if job.has_written(f"{name}: ") and chaos_.caught_up(name, self.counts) and self._has_an_executor(name):
                return
            if (quiet := job.quiet_for()) > idle:
                raise DemoProcessError(
                    name, f"committed no batch after the kill and wrote nothing for {quiet:.0f}s", job.log
                )
        raise DemoProcessError(name, f"committed no batch within {limit:.0f}s of the kill", job.log)

    def _has_an_executor(self, name: str) -> bool:
        """Whether the live job has an executor to run its tasks (always on local[2]: the driver runs them)."""
        return not self.options.spark_workers or bool(self.stack.executors_of(application_name(name)))

    def _an_executor_of(self, name: str) -> psutil.Process:
        """An executor JVM of the live job on the cluster; waits while it has none (a core is being given back)."""
        deadline = time.monotonic() + self.options.idle_timeout_s
        while not (executors := self.stack.executors_of(application_name(name))):
            if time.monotonic() > deadline:
                raise IkkaiError(
                    f"{name} has had no executor on the Spark cluster for {self.options.idle_timeout_s:.0f}s",
                    fix=f"see {self.stack.log_file(SPARK_MASTER)} and the job's log {self.children[name].log}",
                )
            time.sleep(1.0)
        return executors[0]

    def _broker_victim(self, action: str) -> tuple[str, str]:
        """(broker, why): the broker that now leads the output partition or coordinates the transactions
        ``chaos.broker_target`` names for this kill; the next target in turn when that broker was the
        last one killed (leaders move back to their preferred broker, so one broker may lead them all)."""
        number = chaos_.number_of(action)
        choice: tuple[str, str] | None = None
        for turn in range(number, number + 10):
            role, name, partition = chaos_.broker_target(turn, self.options.partitions)
            if role == "coordinator":
                choice = self.stack.coordinator_of(name), f"transaction coordinator of {name}"
            else:
                choice = self.stack.leader_of(name, partition), f"leader of {name}/{partition}"
            if choice[0] != self.last_broker_killed:
                break
        assert choice is not None
        self.last_broker_killed = choice[0]
        return choice

    def _wait_connectors_running(self, timeout_s: float = 180.0) -> None:
        assert self.endpoints is not None
        client = ConnectClient(self.endpoints.connect_url, auth=endpoints_connect_auth(self.endpoints))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                live = client.connectors_expanded()
            except (ConnectRestError, OSError):
                live = {}
            states = [
                s.get("state")
                for data in live.values()
                for s in [data.get("status", {}).get("connector", {}), *data.get("status", {}).get("tasks", [])]
            ]
            if live and states and all(state == "RUNNING" for state in states):
                return
            time.sleep(0.5)
        raise IkkaiError(f"connectors not RUNNING {timeout_s:.0f}s after the worker restart")

    # -- replay ----------------------------------------------------------------------------------

    def _retire(self, name: str) -> None:
        """Stop a live job that has nothing left to do, in the background (``--keep`` leaves it running)."""
        if self.options.keep or name in self.retired:
            return
        self.retired.add(name)
        child = self.children[name]
        stopper = threading.Thread(target=child.stop, name=f"demo-stop-{name}", daemon=True)
        self._stoppers.append(stopper)
        stopper.start()

    def _replay(self) -> dict[str, list[Any]] | None:
        """Wait for both replays to drain and end; the replayed topics, or None when one failed."""
        assert self.endpoints is not None
        if not self.replays.wait(self.options.job_timeout_s):
            return None
        with self.clock.phase("read replay topics"):
            return read_topics(self.cluster, [replay_topic(t) for t in REPLAYED])

    # -- stopping ------------------------------------------------------------------------------

    def _stop(self) -> None:
        for stopper in self._stoppers:
            stopper.join()
        if self.page is not None:
            self.page.stop()
        if self.options.keep:
            alive = {n: c.pid for n, c in self.children.items() if c.alive()}
            for name, pid in alive.items():  # `ikkai stack down` stops them first (stack.attached)
                attached.attach(self.home, name, pid)
            self.say(
                f"--keep: left running: the stack (`ikkai stack --home {self.home} status`; `... down` stops it "
                "and these) "
                "and " + ", ".join(f"{n} pid {pid}" for n, pid in alive.items()) + f"; receiver {self.receiver_url}"
            )
            return
        stoppers = [threading.Thread(target=child.stop, name=f"demo-stop-{name}", daemon=True)
                    for name, child in self.children.items()]  # fmt: skip
        for stopper in stoppers:  # all at once: each may wait out its grace period
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        if self._stack_thread is not None:  # else nothing was started (e.g. a --size too small)
            self._stack_thread.join(300)  # never stop a stack that is still being started
            self.stack.down()
            self.say("stopped everything the demo started")


def run_demo(options: DemoOptions, stream: TextIO = sys.stderr) -> dict[str, Any]:
    """Run the demo; the report (``build_report``), whose ``passed`` says whether every invariant held."""
    return Demo(options, stream).run()

"""AsyncOutboxEmitter cancelled or timed out mid-transaction on the real broker: aborted, or committed and said so.

A cancelled transaction is aborted and the emitter goes on. The worst moments are built on purpose:
the commit or the abort held at a gate (``Gate``) on the emitter's thread while the task is
cancelled or its deadline passes (``JumpingClock``). What a read_committed consumer sees is the
verdict: the caller's answer must be it, and a caller that retries must end with exactly one request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import pytest
from confluent_kafka import Producer, TopicPartition

from ikkai.contract.kafka import KafkaContext
from outbox_sink import (
    AsyncOutboxEmitter,
    CommittedDespiteCancelError,
    OutboxDeliveryError,
    OutboxEmitter,
    OutboxRequest,
    TransactionalConsumer,
)
from stack.kit.topic_io import create_topic, unique
from tests.outbox_sink.conftest import make_request, requests_on


@pytest.mark.integration
def test_a_cancelled_transaction_is_aborted_and_the_emitter_goes_on(
    cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    requests_topic, _ = topics
    cancelled = make_request(1, "pay-1")
    after = make_request(2, "pay-2")

    async def scenario() -> None:
        async with AsyncOutboxEmitter(cluster, transactional_id=unique("svc"), topic=requests_topic) as emitter:
            emitted = asyncio.Event()

            async def service() -> None:
                async with emitter.transaction():
                    await emitter.emit(cancelled)
                    await emitter.flush()
                    emitted.set()
                    await asyncio.Event().wait()  # a request handler stuck on something else: cancelled

            task = asyncio.create_task(service())
            await emitted.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with emitter.transaction():
                await emitter.emit(after)

    asyncio.run(scenario())
    assert requests_on(cluster, requests_topic) == [after]
    written = requests_on(cluster, requests_topic, isolation="read_uncommitted")
    assert {r.decision_id for r in written} == {cancelled.decision_id, after.decision_id}


class Gate:
    """The emitter's real producer, with one of its calls (``commit_transaction``, ``abort_transaction``)
    held at a gate: the test knows the call is running on the emitter's thread, and lets it go on."""

    def __init__(self, emitter: AsyncOutboxEmitter, call: str) -> None:
        inner = emitter._started()
        self._producer, self._call = inner._producer, call
        self.running, self.open, self.returned = threading.Event(), threading.Event(), threading.Event()
        inner._producer = self  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        if name != self._call:
            return getattr(self._producer, name)

        def held(*args: Any) -> Any:
            self.running.set()
            assert self.open.wait(60), "the test never opened the gate"
            result = getattr(self._producer, name)(*args)
            self.returned.set()
            return result

        return held

    async def wait_running(self) -> None:
        assert await asyncio.to_thread(self.running.wait, 60), f"{self._call} never ran"


class RewindWatched(TransactionalConsumer):
    """A TransactionalConsumer that says when it was sought back (``rewind``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.rewound = threading.Event()

    def seek(self, partition: TopicPartition) -> None:
        super().seek(partition)
        self.rewound.set()


async def settle() -> None:
    """Let the tasks woken so far run (the ready queue is FIFO: a cancelled task runs before this resumes)."""
    for _ in range(5):
        await asyncio.sleep(0)


class JumpingClock(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves forward: a deadline (``wait_for``, ``asyncio.timeout``) expires
    exactly when the test says, here while the commit is held at the gate."""

    skew = 0.0

    def time(self) -> float:
        return super().time() + self.skew


Interruption = Literal["wait_for", "asyncio.timeout", "task.cancel"]
HOUR = 3600.0


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


Interrupt = Callable[[list["asyncio.Task[Any]"], asyncio.Event], Awaitable[None]]


async def attempt(emitter: AsyncOutboxEmitter, request: OutboxRequest, how: Interruption, interrupt: Interrupt) -> str:
    """One try of a service that emits ``request`` in a transaction under ``how``, as a caller that retries on
    timeout sees it: "committed" (do not retry) or "not committed" (retry). ``interrupt`` is what the test
    does meanwhile, given the task that runs the transaction (once it runs) and an event set once the caller
    has its answer."""
    loop = asyncio.get_running_loop()
    serving: list[asyncio.Task[Any]] = []
    answered = asyncio.Event()

    async def service() -> None:
        serving.append(asyncio.current_task())  # type: ignore[arg-type]
        async with emitter.transaction():
            await emitter.emit(request)

    interrupter = asyncio.create_task(interrupt(serving, answered))
    try:
        if how == "wait_for":
            await asyncio.wait_for(service(), HOUR)
        elif how == "asyncio.timeout":
            async with asyncio.timeout_at(loop.time() + HOUR):
                await service()
        else:
            await asyncio.create_task(service())
    except CommittedDespiteCancelError as exc:
        assert exc.committed
        return "committed"
    except (TimeoutError, asyncio.CancelledError):
        return "not committed"
    finally:
        answered.set()
        await interrupter
    return "committed"


@pytest.mark.integration
@pytest.mark.parametrize("how", ["wait_for", "asyncio.timeout", "task.cancel"])
@pytest.mark.parametrize("commit", ["commits", "is fenced"])
def test_a_caller_that_retries_on_timeout_or_cancellation_during_the_commit_emits_exactly_once(
    cluster: KafkaContext, topics: tuple[str, str], how: Interruption, commit: str
) -> None:
    """The worst moment built on purpose: the commit is held at a gate on the emitter's thread while the
    deadline passes (the loop's clock jumps) or the task is cancelled, and then commits (or fails: a newer
    instance fenced it meanwhile). The caller's answer must be what a read_committed reader sees, a caller
    that retries on "not committed" must end with exactly one request, and no CancelledError may wait at
    the caller's next await."""
    requests_topic, _ = topics
    transactional_id = unique("svc")
    request = make_request(7, "pay-7")
    views: list[tuple[str, int]] = []  # (the caller's answer, requests a read_committed reader sees then)
    stray: list[str] = []

    def on_the_topic() -> int:
        return sum(r.decision_id == request.decision_id for r in requests_on(cluster, requests_topic))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, JumpingClock)
        emitter = await AsyncOutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic).start()
        gate = Gate(emitter, "commit_transaction")

        async def interrupt(serving: list[asyncio.Task[Any]], answered: asyncio.Event) -> None:
            await gate.wait_running()  # the commit runs, held
            if how == "task.cancel":
                serving[0].cancel()
            else:
                loop.skew += 2 * HOUR  # the deadline passes while the commit is held
            await until(lambda: serving[0].cancelling() > 0 or answered.is_set(), f"{how} never cancelled the task")
            if commit == "is fenced":
                await asyncio.to_thread(
                    lambda: OutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic).close()
                )
            gate.open.set()

        async def leave_be(serving: list[asyncio.Task[Any]], answered: asyncio.Event) -> None:
            pass

        try:
            view = await attempt(emitter, request, how, interrupt)
            try:
                await settle()
            except asyncio.CancelledError:
                stray.append(f"a CancelledError waited at the caller's next await after {view!r}")
            views.append((view, await asyncio.to_thread(on_the_topic)))
        finally:
            await emitter.close()
        while views[-1][0] == "not committed" and len(views) < 3:  # the caller retries, a new instance if fenced
            async with AsyncOutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic) as again:
                view = await attempt(again, request, how, leave_be)
            views.append((view, await asyncio.to_thread(on_the_topic)))

    with asyncio.Runner(loop_factory=JumpingClock) as runner:
        runner.run(scenario())
    first = "committed" if commit == "commits" else "not committed"
    assert views[0] == (first, 1 if commit == "commits" else 0), f"the caller's view {views} vs read_committed"
    assert views[-1] == ("committed", 1), f"the caller retried to {views}: exactly one request must be committed"
    assert stray == []
    assert on_the_topic() == 1


@pytest.mark.integration
def test_a_cancellation_during_a_failing_commit_is_not_done(cluster: KafkaContext, topics: tuple[str, str]) -> None:
    """The commit fails (fenced meanwhile) while the task is cancelled: CancelledError, and nothing committed."""
    requests_topic, _ = topics
    transactional_id = unique("svc")

    async def scenario() -> None:
        async with AsyncOutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic) as emitter:
            gate = Gate(emitter, "commit_transaction")

            async def service() -> None:
                async with emitter.transaction():
                    await emitter.emit(make_request(1, "pay-1"))

            task = asyncio.create_task(service())
            await gate.wait_running()
            await asyncio.to_thread(
                lambda: OutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic).close()
            )  # a newer instance fences this one before its commit reaches the broker
            task.cancel()
            await settle()
            gate.open.set()
            with pytest.raises(asyncio.CancelledError) as caught:
                await task
            assert isinstance(caught.value.__cause__, OutboxDeliveryError) and caught.value.__cause__.fatal

    asyncio.run(scenario())
    assert requests_on(cluster, requests_topic) == []


@pytest.mark.integration
def test_a_second_cancellation_during_the_abort_resumes_the_task_only_after_the_abort_and_rewind(
    cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    requests_topic, _ = topics
    input_topic = create_topic(cluster, unique("decisions.in"))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    for i in range(3):
        producer.produce(input_topic, key=f"pay-{i}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    consumer = RewindWatched({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("svc-group"),
        "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([input_topic])
    cancelled, after = make_request(1, "pay-1"), make_request(2, "pay-2")
    resumed: list[tuple[bool, bool]] = []

    async def scenario() -> None:
        async with AsyncOutboxEmitter(cluster, transactional_id=unique("svc"), topic=requests_topic) as emitter:
            read: list[int] = []
            while len(read) < 3:
                read += [m.offset() or 0 for m in await asyncio.to_thread(consumer.consume, 3, 1.0) if not m.error()]
            gate = Gate(emitter, "abort_transaction")
            emitted = asyncio.Event()

            async def service() -> None:
                try:
                    async with emitter.transaction(consumer):
                        await emitter.emit(cancelled)
                        await emitter.flush()
                        emitted.set()
                        await asyncio.Event().wait()  # cancelled here: the abort starts
                finally:  # the task resumes: were the abort and the rewind finished by then?
                    resumed.append((gate.returned.is_set(), consumer.rewound.is_set()))

            task = asyncio.create_task(service())
            await emitted.wait()
            task.cancel()  # the first: the block is left, the abort runs (and is held)
            await gate.wait_running()
            task.cancel()  # the second, during the shielded abort
            await settle()
            assert not task.done(), "the task resumed before its abort and rewind finished"
            gate.open.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with emitter.transaction():
                await emitter.emit(after)

    try:
        asyncio.run(scenario())
    finally:
        consumer.close()
    assert resumed == [(True, True)], "the task resumed before its abort and rewind finished"
    assert requests_on(cluster, requests_topic) == [after]

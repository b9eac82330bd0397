"""``AsyncOutboxEmitter``: ``OutboxEmitter`` for asyncio services, with the same modes and guarantees.

Every call of the wrapped ``OutboxEmitter`` — the Kafka producer's ``init_transactions``,
``produce``, ``send_offsets_to_transaction``, ``commit_transaction``, ``flush`` — runs on one
thread of the emitter's own, in the order the service awaited them; the event loop never blocks
on the broker. One thread means one order: a request awaited before ``commit`` is in the
transaction, and a transaction's begin, writes and commit or abort never interleave with another
call of the same emitter.

The semantics are ``OutboxEmitter``'s, unchanged (its docstring and docs/outbox.md):

* transactional (``transactional_id`` given)::

      async with AsyncOutboxEmitter(cluster, transactional_id="fraud-actions-0") as emitter:
          async with emitter.transaction():      # or .transaction(consumer): input offsets commit with it
              await emitter.emit(request)
              await emitter.produce("decisions.fraud", key, value)

  the block's requests and records commit together; if the block raises (cancellation included)
  the transaction is aborted and the input consumer rewound, and the exception goes on.
* idempotent (no ``transactional_id``): ``await emit(...)`` queues, ``await flush()`` waits for
  every queued request and raises ``OutboxDeliveryError`` if any was not written.

``emit`` returns once the request is queued, as the sync ``emit`` does; a request is on the
broker after ``flush`` (idempotent) or the transaction's commit (transactional).

Cancellation (``task.cancel()``, ``asyncio.wait_for``, ``asyncio.timeout``): a producer call
cannot be stopped half-way, so the transaction's begin, commit and abort run to their end on the
emitter's thread whatever happens to the awaiting task (each is shielded), the task resumes only
after they finished, and what leaves ``async with emitter.transaction()`` says what happened:

* leaving the block normally means **committed**;
* ``CommittedDespiteCancelError`` means **committed** too: the task was cancelled while the
  commit ran, and the commit went through. It is raised instead of ``CancelledError``, so
  ``wait_for`` and ``asyncio.timeout`` pass it on as it is, not as a ``TimeoutError``; the
  cancellation is consumed (``Task.uncancel``), so no ``CancelledError`` waits at the task's next
  ``await``. Do not retry: the requests are committed.
* ``CancelledError`` (``TimeoutError`` from ``wait_for`` or ``asyncio.timeout``) or any other
  exception out of the block means **not committed**: aborted and the input consumer rewound (or,
  with a fatal ``OutboxDeliveryError``, fenced: never committable). Safe to redo.
* a cancellation while the abort runs (a second one, say) waits for the abort and the rewind to
  finish, then goes on as ``CancelledError``; a cancellation while the transaction begins waits
  for the begin, aborts the empty transaction, then goes on.

The deadline must hold the block, not more: a ``TimeoutError`` from a ``wait_for`` around a
coroutine that awaits something else after the block can come after a commit.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from confluent_kafka import TopicPartition

from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.outbox import OutboxRequest
from ikkai.contract.topics import OUTBOX_REQUESTS
from ikkai.contract.wire_format import environment_codec
from outbox_sink.emitter import OutboxEmitter, TransactionalConsumer
from outbox_sink.errors import CommittedDespiteCancelError, OutboxDeliveryError

T = TypeVar("T")


class AsyncOutboxEmitter:
    """An ``OutboxEmitter`` driven from asyncio: ``await`` its calls, ``async with`` its transactions.

    Construct it, then ``await start()`` (or ``async with`` it): that creates the producer on the
    emitter's thread and, transactional, runs ``init_transactions`` (fencing a zombie of the same
    ``transactional_id``). The arguments are ``OutboxEmitter``'s: ``cluster`` is a ``KafkaContext``, resolved once
    where the service starts (``KafkaContext.from_environment(address)``); ``producer_config`` takes extra
    client settings with Kafka's own names (``security.protocol``, ``sasl.*``, ``ssl.*``).
    """

    def __init__(
        self,
        cluster: KafkaContext,
        *,
        transactional_id: str | None = None,
        topic: str = OUTBOX_REQUESTS,
        codec: RecordCodec | None = None,
        producer_config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.topic = topic
        self.transactional_id = transactional_id
        self.transactional = transactional_id is not None
        self._create = functools.partial(
            OutboxEmitter,
            KafkaContext.of(cluster, "AsyncOutboxEmitter"),  # checked here, on the caller's thread
            transactional_id=transactional_id,
            topic=topic,
            codec=codec or environment_codec(),  # picked here, on the caller's thread
            producer_config=producer_config,
            timeout_s=timeout_s,
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ikkai-outbox-emitter")
        self._emitter: OutboxEmitter | None = None
        self._closed = False
        self._cancels_caught = 0  # set by _to_the_end: how often the task was cancelled while its call ran
        self._cancels_requested = 0  # set by _to_the_end: the cancellations requested meanwhile (Task.cancelling)

    async def start(self) -> AsyncOutboxEmitter:
        """Create the producer (and initialise its transactions) on the emitter's thread; once."""
        if self._emitter is None:
            self._emitter, cancelled = await self._to_the_end(self._create)
            if cancelled:  # created all the same: kept, so close() lets it go
                raise asyncio.CancelledError
        return self

    # -- writing -------------------------------------------------------------------------------

    async def emit(self, request: OutboxRequest, *, headers: Mapping[str, str] | None = None) -> str:
        """Queue one request (see ``OutboxEmitter.emit``); returns its decision_id."""
        emitter = self._started()
        return await self._run(functools.partial(emitter.emit, request, headers=headers))

    async def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Mapping[str, str] | None = None
    ) -> None:
        """The service's own output, in the same transaction as its requests (transactional mode only)."""
        emitter = self._started()
        await self._run(functools.partial(emitter.produce, topic, key, value, headers))

    @asynccontextmanager
    async def transaction(self, consumer: TransactionalConsumer | None = None) -> AsyncIterator[AsyncOutboxEmitter]:
        """``OutboxEmitter.transaction`` awaited: everything emitted inside commits together, or is aborted.

        The sync context manager is entered and left on the emitter's thread; an exception
        leaving the block (``asyncio.CancelledError`` included) aborts the transaction there and
        rewinds ``consumer``, and then goes on to the caller.

        Leaving the block normally, or with ``CommittedDespiteCancelError``, means committed; any
        other exception (``CancelledError``, and ``TimeoutError`` from ``wait_for`` or
        ``asyncio.timeout``, included) means not committed. The module docstring says what a
        cancellation during the begin, the commit or the abort does (the task resumes only once
        each has finished).
        """
        emitter = self._started()
        manager = emitter.transaction(consumer)
        _, cancelled = await self._to_the_end(manager.__enter__)
        if cancelled:  # begun all the same: end it aborted before the cancellation goes on
            stop = asyncio.CancelledError()
            await self._to_the_end(manager.__exit__, asyncio.CancelledError, stop, None)
            raise stop
        try:
            yield self
        except BaseException as exc:
            suppressed, again = await self._to_the_end(manager.__exit__, type(exc), exc, exc.__traceback__)
            if again and not isinstance(exc, asyncio.CancelledError):
                raise asyncio.CancelledError from exc  # aborted and rewound; now the cancellation goes on
            if not suppressed:
                raise
        else:
            try:
                _, cancelled = await self._to_the_end(manager.__exit__, None, None, None)
            except BaseException as failed:  # not committed (aborted, or fenced): raised as it is ...
                if self._cancels_caught:  # ... unless the task was cancelled meanwhile: not done, cancelled
                    raise asyncio.CancelledError from failed
                raise
            if cancelled:  # committed although cancelled: said so, and the cancellation is answered by it
                self._consume_cancellation()
                raise CommittedDespiteCancelError(self.topic, self.transactional_id or "")

    async def send_offsets(self, offsets: Sequence[TopicPartition] | None = None) -> None:
        """``OutboxEmitter.send_offsets``: these input offsets commit with the open transaction."""
        emitter = self._started()
        await self._run(emitter.send_offsets, offsets)

    async def abort(self) -> None:
        """Abort the open transaction on purpose (its requests are never delivered; its input is read again)."""
        await self._run(self._started().abort)

    async def flush(self) -> None:
        """Wait for every queued record; raise ``OutboxDeliveryError`` if any was not written."""
        await self._run(self._started().flush)

    async def close(self) -> None:
        """Flush (idempotent mode: raising if a request was not written) and let the emitter's thread go."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._emitter is not None:
                await self._run(self._emitter.close)
        finally:
            self._thread.shutdown(wait=False)

    async def __aenter__(self) -> AsyncOutboxEmitter:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals -----------------------------------------------------------------------------

    def _started(self) -> OutboxEmitter:
        if self._closed:
            raise OutboxDeliveryError(self.topic, "the emitter is closed", fatal=True, fix="create a new one")
        if self._emitter is None:
            raise OutboxDeliveryError(
                self.topic, "the emitter is not started", fatal=True,
                fix="`await emitter.start()` first, or use `async with AsyncOutboxEmitter(...) as emitter:`",
            )  # fmt: skip
        return self._emitter

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on the emitter's thread, in submission order; the caller's context goes along."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._thread, context.run, call, *args)

    async def _to_the_end(self, call: Callable[..., T], *args: Any) -> tuple[T, bool]:
        """``call(*args)`` on the emitter's thread, awaited to its end even if this task is cancelled meanwhile.

        Returns its result and whether the task was cancelled while it ran; its exception is raised
        (``_cancels_caught`` then says whether the task was cancelled too). ``_cancels_requested``
        counts the cancellations requested meanwhile (``Task.cancelling``). The caller raises the
        cancellation, or answers it otherwise and consumes it (``_consume_cancellation``).
        """
        task = asyncio.current_task()
        before = task.cancelling() if task is not None else 0
        self._cancels_caught = 0
        future = asyncio.ensure_future(self._run(call, *args))
        try:
            while not future.done():
                try:
                    await asyncio.shield(future)
                except asyncio.CancelledError:
                    if future.done() and future.cancelled():  # the emitter's thread went away: nothing to wait for
                        raise
                    self._cancels_caught += 1
        finally:
            self._cancels_requested = max(0, task.cancelling() - before) if task is not None else 0
        return future.result(), self._cancels_caught > 0

    def _consume_cancellation(self) -> None:
        """The cancellations ``_to_the_end`` caught are answered, not raised: taken back (``Task.uncancel``), so
        no ``CancelledError`` waits at the task's next ``await`` and ``asyncio.timeout`` turns nothing into a
        ``TimeoutError``."""
        task = asyncio.current_task()
        if task is not None:
            for _ in range(self._cancels_requested):
                task.uncancel()

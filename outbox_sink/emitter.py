"""``OutboxEmitter``: how a service asks for a side effect — a record on ``outbox.requests``, never an HTTP call.

Two modes, chosen by whether the service writes output of its own:

* **transactional** (``transactional_id`` given): the requests and the service's own records
  are written in one Kafka transaction (``with emitter.transaction(): ...``); a read_committed
  reader, the outbox sink included, sees all of them or none. The ``transactional_id`` must be
  stable per service instance, so a restarted instance fences its zombie.

  A service that consumes, decides and emits passes its input consumer, a
  ``TransactionalConsumer``: ``with emitter.transaction(consumer): ...`` commits the consumed
  input offsets in the same transaction (KIP-447), so after a crash the restarted service
  resumes exactly after the last committed requests — none repeated, none missing. An aborted
  transaction rewinds the consumer to its committed offsets, or where it started reading a
  partition that has none (``rewind``). docs/outbox.md shows
  the loop.
* **idempotent** (no ``transactional_id``): ``enable.idempotence`` producer; ``emit`` then
  ``flush``, which raises if any request did not make it.

The record key is the request's business key (order per key), the value the Avro
single-object encoding of ``schemas/outbox_request``.

The emitter takes the cluster as a ``KafkaContext``, resolved once where the service starts —
``KafkaContext.from_environment(address)`` reads ``IKKAI_KAFKA_CONFIG``'s client file then — and
reads no environment of its own; a bare address is refused (``ConfigError``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.outbox import REQUEST_SCHEMA, OutboxRequest, check_kafka_headers
from ikkai.contract.topics import OUTBOX_REQUESTS
from ikkai.contract.wire_format import environment_codec
from ikkai.errors import ConfigError
from outbox_sink.errors import ConsumedOffsetsError, InputRewindError, OutboxDeliveryError

RETRY_DEADLINE_S = 60.0
# What the input consumer of a consume-and-emit service must be, and why (the "what to do" of a refusal).
TRANSACTIONAL_CONSUMER = {
    "enable.auto.commit": (
        False,
        "its offsets are committed in the emitter's transaction; an auto-commit would commit them without the "
        "requests (drop the setting)",
    ),
    "isolation.level": (
        "read_committed",
        "an input record of an aborted transaction must not lead to a request (drop the setting)",
    ),
}


def transactional_consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the settings a ``TransactionalConsumer`` needs; a config asking otherwise is refused."""
    source = "TransactionalConsumer config"
    if not config.get("group.id"):
        raise ConfigError(
            source, "group.id", "is missing", fix="name the consumer group whose offsets the transactions commit"
        )
    for key, (wanted, why) in TRANSACTIONAL_CONSUMER.items():
        if key in config and str(config[key]).strip().lower() != str(wanted).lower():
            raise ConfigError(source, key, f"is {config[key]!r}, must be {str(wanted).lower()}", fix=why)
    return {**config, **{key: wanted for key, (wanted, _) in TRANSACTIONAL_CONSUMER.items()}}


class TransactionalConsumer(Consumer):
    """The input consumer of a service that consumes, decides and emits through a transactional emitter.

    A confluent-kafka ``Consumer`` (same config, Kafka's dotted names, ``group.id`` required) with
    auto-commit off and ``read_committed`` on; its offsets are committed only by
    ``with emitter.transaction(consumer): ...``, so ``commit()`` is refused.

    It remembers where it started reading each partition since the partition was assigned (the
    first record or end-of-partition event ``consume``/``poll`` handed out: where its own
    ``auto.offset.reset`` put it). A partition with no committed offset is rewound there after an
    abort (``rewind``), never to the topic's start: a new service whose first transaction aborts
    reads only what it had read, not the retained history its ``latest`` reset skipped.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(transactional_consumer_config(config))
        self._starts: dict[tuple[str, int], int] = {}  # (topic, partition) -> first offset handed out since assigned

    def commit(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ConsumedOffsetsError(
            "commit() on a TransactionalConsumer would commit input offsets without the requests made from it",
            fix="let `with emitter.transaction(consumer):` commit them (or emitter.send_offsets(...) inside it)",
        )

    def started_at(self, topic: str, partition: int) -> int | None:
        """The first offset handed out from this partition since it was assigned; None before any."""
        return self._starts.get((topic, partition))

    def subscribe(
        self,
        topics: list[str],
        on_assign: Callable[[Consumer, list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[Consumer, list[TopicPartition]], None] | None = None,
        on_lost: Callable[[Consumer, list[TopicPartition]], None] | None = None,
    ) -> None:
        """``Consumer.subscribe``; the callbacks run after the consumer forgets the partitions' start positions."""

        def forgetting(
            callback: Callable[[Consumer, list[TopicPartition]], None] | None,
        ) -> Callable[[Consumer, list[TopicPartition]], None]:
            def handle(consumer: Consumer, partitions: list[TopicPartition]) -> None:
                self._forget(partitions)
                if callback is not None:
                    callback(consumer, partitions)

            return handle

        lost = forgetting(on_lost if on_lost is not None else on_revoke)  # Kafka's default: a loss is a revoke
        super().subscribe(topics, on_assign=forgetting(on_assign), on_revoke=forgetting(on_revoke), on_lost=lost)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._forget(partitions)
        super().assign(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._forget(partitions)
        super().incremental_assign(partitions)

    def consume(self, *args: Any, **kwargs: Any) -> list[Message]:
        messages: list[Message] = super().consume(*args, **kwargs)
        for message in messages:
            self._note(message)
        return messages

    def poll(self, *args: Any, **kwargs: Any) -> Message | None:
        message: Message | None = super().poll(*args, **kwargs)
        if message is not None:
            self._note(message)
        return message

    def _note(self, message: Message) -> None:
        error = message.error()
        place = (message.topic() or "", message.partition() or 0)
        offset = message.offset()
        if (error is None or error.code() == KafkaError._PARTITION_EOF) and offset is not None and offset >= 0:
            self._starts.setdefault(place, offset)

    def _forget(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            self._starts.pop((tp.topic, tp.partition), None)


def rewind(consumer: Consumer, timeout_s: float = 30.0) -> None:
    """Seek each partition assigned to ``consumer`` back to where the aborted input began.

    That is the partition's committed offset; with none (a new group), the offset the consumer
    started from when the partition was assigned (``TransactionalConsumer.started_at``: where its
    ``auto.offset.reset`` put it), so nothing read is skipped and nothing it never read — history
    a ``latest`` reset passed over — is read. A partition it has read nothing from is left where
    it is. A plain ``Consumer`` does not know where it started: with no committed offset its
    rewind is refused (``InputRewindError``).
    """
    try:
        assigned = consumer.assignment()
        if not assigned:
            return
        for committed in consumer.committed(assigned, timeout=timeout_s):
            if committed.error is not None:
                raise InputRewindError(f"{committed.topic}[{committed.partition}]: {committed.error.str()}")
            offset: int | None = committed.offset if committed.offset >= 0 else None
            if offset is None:
                if not isinstance(consumer, TransactionalConsumer):
                    raise InputRewindError(
                        f"{committed.topic}[{committed.partition}] has no committed offset, and a plain Consumer "
                        "does not know where it started reading (use a TransactionalConsumer)"
                    )
                offset = consumer.started_at(committed.topic, committed.partition)
                if offset is None:  # nothing read from it since it was assigned: nothing to read again
                    continue
            consumer.seek(TopicPartition(committed.topic, committed.partition, offset))
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        raise InputRewindError(error.str()) from exc


class OutboxEmitter:
    """Requests onto ``topic`` for the cluster ``cluster`` (a ``KafkaContext``, resolved at the service's entry)."""

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
        self.transactional = transactional_id is not None
        self.timeout_s = timeout_s
        self._codec = codec or environment_codec()  # IKKAI_SCHEMA_REGISTRY_URL picks the wire format
        self._failures: list[tuple[str, KafkaError]] = []
        # The cluster as the service's entry resolved it (KafkaContext.from_environment): no environment read here.
        config = KafkaContext.of(cluster, "OutboxEmitter").producer_config(**(producer_config or {}))
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        self._producer = Producer(config)
        self._in_transaction = False
        self._consumer: TransactionalConsumer | None = None
        self._offsets_sent = False
        if self.transactional:
            self._with_retries("init_transactions", lambda: self._producer.init_transactions(timeout_s))

    # -- writing -------------------------------------------------------------------------------

    def emit(self, request: OutboxRequest, *, headers: Mapping[str, str] | None = None) -> str:
        """Queue one request (Kafka headers such as ``traceparent`` go along); returns its decision_id.

        A request or trace header the sink could not send over HTTP is refused here (``OutboxRequestError``,
        docs/outbox.md "What a request may carry"), before anything is queued.
        """
        check_kafka_headers(request.decision_id, headers or {})
        value = self._codec.encode(REQUEST_SCHEMA, request.to_record())
        self._produce(self.topic, request.key.encode(), value, headers)
        return request.decision_id

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Mapping[str, str] | None = None
    ) -> None:
        """The service's own output, in the same transaction as its requests (transactional mode only)."""
        if not self.transactional:
            raise OutboxDeliveryError(
                topic, "the emitter is not transactional", fatal=True,
                fix="give OutboxEmitter a transactional_id to write requests and own output atomically",
            )  # fmt: skip
        self._produce(topic, key, value, headers)

    @contextmanager
    def transaction(self, consumer: TransactionalConsumer | None = None) -> Iterator[OutboxEmitter]:
        """Everything emitted or produced inside commits together, or is aborted if the block raises.

        With ``consumer`` (consume, decide, emit): the input offsets commit in the same
        transaction — the consumer's positions, unless ``send_offsets`` named others inside the
        block — and whenever the transaction is aborted the consumer is rewound to its committed
        offsets, so the aborted input is read again. Errors come classified: an abortable one
        (``fatal`` False) has been aborted and rewound, redo the work; a fatal one (fenced)
        means stop.
        """
        if consumer is not None and not isinstance(consumer, TransactionalConsumer):
            raise ConsumedOffsetsError(
                f"{type(consumer).__name__} may auto-commit or read aborted records; the emitter cannot tell",
                fix="create the input consumer as outbox_sink.emitter.TransactionalConsumer(config)",
            )
        if not self.transactional:
            raise OutboxDeliveryError(
                self.topic, "transaction() needs a transactional emitter", fatal=True,
                fix="give OutboxEmitter a transactional_id, or use emit() + flush()"
                if consumer is None
                else "give OutboxEmitter a transactional_id: input offsets commit only within its transactions",
            )  # fmt: skip
        self._with_retries("begin_transaction", self._producer.begin_transaction)
        self._in_transaction = True
        self._consumer = consumer
        self._offsets_sent = False
        try:
            try:
                yield self
            except BaseException:
                self._abort()
                raise
            if not self._in_transaction:  # abort() inside the block: nothing left to commit
                return
            try:
                if consumer is not None and not self._offsets_sent:
                    self.send_offsets()
                self._with_retries("commit_transaction", lambda: self._producer.commit_transaction(self.timeout_s))
            except OutboxDeliveryError as exc:
                if not exc.fatal:
                    self._abort()
                raise
        finally:
            self._in_transaction = False
            self._consumer = None

    def send_offsets(self, offsets: Sequence[TopicPartition] | None = None) -> None:
        """Commit these input offsets with the open transaction; by default the consumer's positions.

        Each offset is the next one to read (the last processed record's offset + 1). Only
        inside ``with emitter.transaction(consumer):``, which calls it at the end of the block
        when the block did not.
        """
        consumer = self._consumer
        if consumer is None or not self._in_transaction:
            raise ConsumedOffsetsError(
                "send_offsets() outside a transaction opened with the input consumer",
                fix="call it inside `with emitter.transaction(consumer):`",
            )
        if offsets is None:
            assigned = consumer.assignment()
            if not assigned:
                raise OutboxDeliveryError(
                    self.topic, "the input consumer has no partitions assigned (lost in a rebalance?)", fatal=False,
                    fix="the transaction is aborted; poll again and redo the work",
                )  # fmt: skip
            offsets = consumer.position(assigned)
        positions = list(offsets)
        self._with_retries(
            "send_offsets_to_transaction",
            lambda: self._producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), self.timeout_s
            ),
        )
        self._offsets_sent = True

    def abort(self) -> None:
        """Abort the open transaction on purpose (its requests are never delivered; its input is read again)."""
        self._abort()

    def flush(self) -> None:
        """Wait for every queued record; raise if any was not written (idempotent mode)."""
        try:
            remaining = self._drain()
        except KafkaException as exc:
            raise self._classified("flush", exc.args[0]) from exc
        if remaining:
            raise OutboxDeliveryError(
                self.topic, f"{remaining} record(s) still queued after {self.timeout_s}s", fatal=False
            )
        if self._failures:
            topic, error = self._failures[0]
            count = len(self._failures)
            self._failures.clear()
            raise OutboxDeliveryError(
                topic, f"{count} record(s) not written; first: {error.str()}", fatal=error.fatal()
            )

    def close(self) -> None:
        """Idempotent mode: wait for what is queued (``flush``). Transactional mode: drop what is still
        queued, never wait for it. A record queued outside an open transaction belongs to one that
        failed to commit (fenced, or the client broke), so no reader will ever see it; waiting would
        serve its failed delivery report, where confluent-kafka 2.16 can raise a SystemError from
        ``flush`` (seen with and without the fatal error as its cause). Inside an open transaction
        close leaves the records alone: the block's end commits them or reports why it could not."""
        if not self.transactional:
            self.flush()
        elif not self._in_transaction:
            self._producer.purge(in_queue=True, in_flight=True, blocking=True)

    def _drain(self) -> int:
        """``producer.flush``: the records still queued; a fatal error served meanwhile is raised as
        its KafkaException. (confluent-kafka 2.16's error callback leaves a fatal error's exception
        set while the same flush goes on to serve a delivery report, and CPython then raises a
        SystemError from ``_delivered`` with that KafkaException as its cause.)"""
        try:
            return int(self._producer.flush(self.timeout_s))
        except SystemError as exc:
            if isinstance(exc.__cause__, KafkaException):
                raise exc.__cause__ from None
            raise

    def __enter__(self) -> OutboxEmitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _produce(self, topic: str, key: bytes | None, value: bytes | None, headers: Mapping[str, str] | None) -> None:
        if self.transactional and not self._in_transaction:
            raise OutboxDeliveryError(
                topic, "a transactional emitter writes only inside `with emitter.transaction():`", fatal=True
            )
        kafka_headers: list[tuple[str, str | bytes | None]] = [(k, v.encode()) for k, v in (headers or {}).items()]
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=kafka_headers, on_delivery=self._delivered)
                return
            except BufferError:  # local queue full: let deliveries drain, then try again
                self._producer.poll(0.1)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failures.append((message.topic() or self.topic, error))

    def _abort(self) -> None:
        """Abort the open transaction, then rewind the input consumer of a consume-and-emit transaction."""
        if not self._in_transaction:
            return
        self._in_transaction = False
        try:
            self._with_retries("abort_transaction", lambda: self._producer.abort_transaction(self.timeout_s))
        except OutboxDeliveryError as exc:  # the transaction's fate is unknown: this emitter cannot go on
            raise OutboxDeliveryError(
                self.topic, exc.problem, fatal=True,
                fix="close this emitter and create a new one (its transactional.id fences this one)",
            ) from exc  # fmt: skip
        if self._consumer is not None:
            rewind(self._consumer, self.timeout_s)

    def _with_retries(self, what: str, call: Any) -> None:
        """Retriable errors are retried within a deadline; abortable and fatal ones are raised, classified."""
        deadline = time.monotonic() + RETRY_DEADLINE_S
        delay = 0.1
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.retriable() and time.monotonic() + delay < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                raise self._classified(what, error) from exc

    def _classified(self, what: str, error: KafkaError) -> OutboxDeliveryError:
        """A client error as the emitter reports it: fatal (fenced or broken), abortable, or neither."""
        fix = (
            "this producer is fenced or broken: create a new emitter (a newer one owns the transactional.id)"
            if error.fatal() and self.transactional
            else "this producer is broken: create a new emitter"
            if error.fatal()
            else "the transaction was aborted; redo the unit of work"
            if error.txn_requires_abort()
            else None
        )
        return OutboxDeliveryError(self.topic, f"{what}: {error.str()}", fatal=error.fatal(), fix=fix)

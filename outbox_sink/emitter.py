"""``OutboxEmitter``: how a service asks for a side effect — a record on ``outbox.requests``, never an HTTP call.

Two modes, chosen by whether the service writes output of its own:

* **transactional** (``transactional_id`` given): the requests and the service's own records
  are written in one Kafka transaction (``with emitter.transaction(): ...``); a read_committed
  reader, the outbox sink included, sees all of them or none. The ``transactional_id`` must be
  stable per unit of work (one per input partition), so a restarted instance fences its zombie.
* **idempotent** (no ``transactional_id``): ``enable.idempotence`` producer; ``emit`` then
  ``flush``, which raises if any request did not make it.

The record key is the request's business key (order per key), the value the Avro
single-object encoding of ``schemas/outbox_request``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from outbox_sink.contract import REQUEST_SCHEMA, REQUESTS_TOPIC, OutboxRequest
from outbox_sink.errors import OutboxDeliveryError
from spark_jobs.serialization import RecordCodec, default_codec

SAFE_PRODUCER = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
}
RETRY_DEADLINE_S = 60.0


class OutboxEmitter:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        transactional_id: str | None = None,
        topic: str = REQUESTS_TOPIC,
        codec: RecordCodec | None = None,
        producer_config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.topic = topic
        self.transactional = transactional_id is not None
        self.timeout_s = timeout_s
        self._codec = codec or default_codec()
        self._failures: list[tuple[str, KafkaError]] = []
        config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, **(producer_config or {}), **SAFE_PRODUCER}
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        self._producer = Producer(config)
        self._in_transaction = False
        if self.transactional:
            self._with_retries("init_transactions", lambda: self._producer.init_transactions(timeout_s))

    # -- writing -------------------------------------------------------------------------------

    def emit(self, request: OutboxRequest, *, headers: Mapping[str, str] | None = None) -> str:
        """Queue one request (Kafka headers such as ``traceparent`` go along); returns its decision_id."""
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
    def transaction(self) -> Iterator[OutboxEmitter]:
        """Everything emitted or produced inside commits together, or is aborted if the block raises."""
        if not self.transactional:
            raise OutboxDeliveryError(
                self.topic, "transaction() needs a transactional emitter", fatal=True,
                fix="give OutboxEmitter a transactional_id, or use emit() + flush()",
            )  # fmt: skip
        self._producer.begin_transaction()
        self._in_transaction = True
        try:
            yield self
        except BaseException:
            self._abort()
            raise
        try:
            self._with_retries("commit_transaction", lambda: self._producer.commit_transaction(self.timeout_s))
        except OutboxDeliveryError as exc:
            if not exc.fatal:
                self._abort()
            raise
        finally:
            self._in_transaction = False

    def abort(self) -> None:
        """Abort the open transaction on purpose (its requests are never delivered)."""
        self._abort()

    def flush(self) -> None:
        """Wait for every queued record; raise if any was not written (idempotent mode)."""
        remaining = self._producer.flush(self.timeout_s)
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
        if not self.transactional:
            self.flush()
        else:
            self._producer.flush(self.timeout_s)

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
        if self._in_transaction:
            self._in_transaction = False
            self._with_retries("abort_transaction", lambda: self._producer.abort_transaction(self.timeout_s))

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
                fix = (
                    "this producer is fenced or broken: create a new emitter (a newer one owns the transactional.id)"
                    if error.fatal()
                    else "the transaction was aborted; redo the unit of work"
                    if error.txn_requires_abort()
                    else None
                )
                raise OutboxDeliveryError(self.topic, f"{what}: {error.str()}", fatal=error.fatal(), fix=fix) from exc

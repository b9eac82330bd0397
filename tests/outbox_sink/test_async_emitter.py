"""AsyncOutboxEmitter on the real broker: the sync emitter's guarantees, awaited.

What a read_committed consumer sees is the verdict: a committed transaction's requests and own
records all, an aborted or cancelled one's none (a read_uncommitted consumer sees they were
written), input offsets committed with the requests, a fenced emitter's none. A transaction
cancelled or timed out on the way: ``test_async_emitter_cancellation.py``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from ikkai.contract.kafka import KafkaContext
from outbox_sink import AsyncOutboxEmitter, OutboxDeliveryError, OutboxEmitter, TransactionalConsumer
from stack.kit.topic_io import create_topic, read_all, unique
from tests.outbox_sink.conftest import make_request, requests_on

NOWHERE = "127.0.0.1:9"  # nothing listens: these checks fail before anything is sent


class Boom(Exception):
    pass


def test_an_emitter_must_be_started_and_an_idempotent_one_has_no_transactions() -> None:
    async def scenario() -> None:
        emitter = AsyncOutboxEmitter(KafkaContext(NOWHERE), producer_config={"log_level": 0})
        with pytest.raises(OutboxDeliveryError) as caught:
            await emitter.emit(make_request(0, "pay-0"))
        assert caught.value.fatal and "start" in str(caught.value)
        async with emitter:
            with pytest.raises(OutboxDeliveryError) as caught:
                async with emitter.transaction():
                    pass
            assert caught.value.fatal
            with pytest.raises(OutboxDeliveryError):
                await emitter.produce("decisions.fraud", b"pay-0", b"x")
        with pytest.raises(OutboxDeliveryError) as caught:
            await emitter.emit(make_request(0, "pay-0"))
        assert "closed" in str(caught.value)

    asyncio.run(scenario())


@pytest.mark.integration
def test_idempotent_requests_are_on_the_topic_after_flush(cluster: KafkaContext, topics: tuple[str, str]) -> None:
    requests_topic, _ = topics
    sent = [make_request(i, f"pay-{i % 3}") for i in range(20)]

    async def scenario() -> None:
        async with AsyncOutboxEmitter(cluster, topic=requests_topic) as emitter:
            ids = [await emitter.emit(r, headers={"traceparent": "00-1-2-01"}) for r in sent]
            await emitter.flush()
        assert ids == [r.decision_id for r in sent]

    asyncio.run(scenario())
    got = requests_on(cluster, requests_topic)
    assert sorted(got, key=lambda r: r.created_at) == sent


@pytest.mark.integration
def test_a_transaction_commits_everything_or_an_exception_aborts_everything(
    cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    requests_topic, own_topic = topics
    committed = [make_request(i, f"pay-{i}") for i in range(5)]
    aborted = [make_request(100 + i, f"pay-{i}") for i in range(5)]

    async def scenario() -> None:
        async with AsyncOutboxEmitter(cluster, transactional_id=unique("svc"), topic=requests_topic) as emitter:
            with pytest.raises(Boom):
                async with emitter.transaction():
                    for r in aborted:
                        await emitter.emit(r)
                    await emitter.produce(own_topic, b"pay-x", b"aborted")
                    await emitter.flush()  # on the broker, so the read_uncommitted check below means something
                    raise Boom
            async with emitter.transaction():
                for r in committed:
                    await emitter.emit(r)
                await emitter.produce(own_topic, b"pay-x", b"committed")

    asyncio.run(scenario())
    assert sorted(requests_on(cluster, requests_topic), key=lambda r: r.created_at) == committed
    assert [v for _, v in read_all(cluster, own_topic)] == [b"committed"]
    written = requests_on(cluster, requests_topic, isolation="read_uncommitted")
    assert {r.decision_id for r in written} == {r.decision_id for r in committed + aborted}


@pytest.mark.integration
def test_input_offsets_commit_with_the_requests_and_an_abort_rewinds(
    cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    requests_topic, _ = topics
    input_topic = create_topic(cluster, unique("decisions.in"))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    for i in range(4):
        producer.produce(input_topic, key=f"pay-{i}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    group = unique("svc-group")
    consumer = TransactionalConsumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([input_topic])

    async def take(count: int) -> list[int]:
        values: list[int] = []
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            batch = await asyncio.to_thread(consumer.consume, count - len(values), 1.0)
            values += [int(m.value() or b"") for m in batch if m.error() is None]
        return values

    async def scenario() -> list[list[int]]:
        seen = []
        async with AsyncOutboxEmitter(cluster, transactional_id=unique("svc"), topic=requests_topic) as emitter:
            first = await take(4)
            with pytest.raises(Boom):
                async with emitter.transaction(consumer):
                    for i in first:
                        await emitter.emit(make_request(i, f"pay-{i}"))
                    raise Boom  # aborted: the consumer is rewound, the same four are read again
            again = await take(4)
            async with emitter.transaction(consumer):
                for i in again:
                    await emitter.emit(make_request(i, f"pay-{i}"))
            seen += [first, again]
        return seen

    try:
        first, again = asyncio.run(scenario())
        committed = consumer.committed(consumer.assignment(), timeout=30)
    finally:
        consumer.close()
    assert first == again == [0, 1, 2, 3]
    assert [(c.partition, c.offset) for c in committed] == [(0, 4)]  # committed by the transaction, with them
    assert sorted(r.created_at for r in requests_on(cluster, requests_topic)) == [
        make_request(i, f"pay-{i}").created_at for i in range(4)
    ]


@pytest.mark.integration
def test_a_newer_emitter_with_the_same_transactional_id_fences_the_older(
    cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    requests_topic, _ = topics
    transactional_id = unique("svc")

    async def scenario() -> None:
        zombie = AsyncOutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic)
        new = AsyncOutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic)
        async with zombie, new:  # the newer one's init_transactions fences the older
            with pytest.raises(OutboxDeliveryError) as caught:
                async with zombie.transaction():
                    await zombie.emit(make_request(1, "pay-1"))
            assert caught.value.fatal
            async with new.transaction():
                await new.emit(make_request(2, "pay-2"))

    asyncio.run(scenario())
    assert requests_on(cluster, requests_topic) == [make_request(2, "pay-2")]


@pytest.mark.integration
def test_closing_an_emitter_fenced_with_a_record_in_flight_is_quiet_and_loses_nothing_committed(
    cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    """A shutdown hook closing a fenced emitter mid-transaction: its record's AddPartitionsToTxn came
    back fenced, so the fatal error and the record's failed delivery report wait in the same queue
    when close() flushes. A plain confluent-kafka 2.16 flush raises SystemError from the delivery
    callback there (a library slip); close() must end quietly, the commit after it must fail as
    fenced, and only the newer emitter's request is ever read."""
    requests_topic, _ = topics
    transactional_id = unique("svc")
    zombie = OutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic)
    with OutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic) as newer:
        stale, fresh = make_request(1, "pay-1"), make_request(2, "pay-2")
        closed_quietly = False
        with pytest.raises(OutboxDeliveryError) as caught, zombie.transaction():
            zombie.emit(stale)
            time.sleep(2)  # the broker answers the zombie's AddPartitionsToTxn: fenced
            zombie.close()
            closed_quietly = True
        assert closed_quietly  # (a SystemError from close() would be masked by the fenced abort after it)
        assert caught.value.fatal and "fenced" in str(caught.value)
        with newer.transaction():
            newer.emit(fresh)
    assert requests_on(cluster, requests_topic) == [fresh]


class LibrarySlip:
    """The emitter's real producer, except that serving delivery reports fails the way confluent-kafka
    2.16 sometimes does for a fenced producer: ``SystemError`` with no cause (seen in a CI run)."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    def __getattr__(self, name: str) -> Any:
        if name in ("flush", "poll"):

            def slipped(*_: Any) -> Any:
                raise SystemError(
                    f"<built-in method {name} of cimpl.Producer object> returned NULL without setting an exception"
                )

            return slipped
        return getattr(self._producer, name)


@pytest.mark.integration
def test_closing_an_emitter_whose_commit_was_fenced_never_serves_its_delivery_reports(
    cluster: KafkaContext, topics: tuple[str, str]
) -> None:
    """After a commit fenced with a record of it still queued, close() must not wait for that
    record: it can never be read, and serving its failed delivery report is where the library can
    fail without a cause. close() ends quietly; the newer emitter's request is the only one read."""
    requests_topic, _ = topics
    transactional_id = unique("svc")
    zombie = OutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic)
    with OutboxEmitter(cluster, transactional_id=transactional_id, topic=requests_topic) as newer:
        stale, fresh = make_request(1, "pay-1"), make_request(2, "pay-2")
        with pytest.raises(OutboxDeliveryError) as caught, zombie.transaction():
            zombie.emit(stale)
        assert caught.value.fatal and "fenced" in str(caught.value)
        zombie._producer = LibrarySlip(zombie._producer)  # type: ignore[assignment]
        zombie.close()
        with newer.transaction():
            newer.emit(fresh)
    assert requests_on(cluster, requests_topic) == [fresh]

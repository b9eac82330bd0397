"""A tiny consume-decide-emit service, run in its own process by test_emitter_consume_process.py.

For each input record it emits one ``OutboxRequest`` (key = the input's key, decision_id from the
input's topic/partition/offset), a batch per transaction, until it has read every assigned input
partition to its end. ``--kill-at`` makes it SIGKILL itself at a chosen point of the
``--kill-after``-th transaction, so the tests build the worst interleavings on purpose:

* ``transaction-open``: requests written to the log (and, the exactly-once way, the input offsets
  sent), nothing committed;
* ``between-commits``: right after a transaction committed, before the next one begins;
* ``before-offset-commit``: the transaction committed, the consumer's offsets not yet (with
  ``--offsets in-transaction`` they committed with it, so this is ``between-commits``).

``--offsets in-transaction`` is the exactly-once way (``emitter.transaction(consumer)``);
``--offsets after-commit`` is how a service did it before: commit the requests, then the
consumer's offsets on their own.

Prints ``committed <n>`` after each transaction and ``open <n>`` just before a kill with a
transaction open, so the tests know how many requests each step holds.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, Message

from ikkai.contract.kafka import KafkaContext
from outbox_sink import OutboxDeliveryError, OutboxEmitter, OutboxRequest, derive_decision_id
from outbox_sink.emitter import TransactionalConsumer

MODEL = "consume-process@test"
KILL_POINTS = ("none", "transaction-open", "between-commits", "before-offset-commit")


def decide(message: Message) -> OutboxRequest:
    key = (message.key() or b"").decode()
    event_id = f"{message.topic()}/{message.partition()}/{message.offset()}"
    _, timestamp = message.timestamp()
    return OutboxRequest(
        decision_id=derive_decision_id(key, event_id, MODEL),
        key=key,
        target="payments-api",
        path=f"/holds/{key}",
        body=message.value() or b"{}",
        created_at=max(timestamp, 0),
        model_version=MODEL,
    )


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Service:
    def __init__(self, args: argparse.Namespace) -> None:
        self.kill_at: str = args.kill_at
        self.kill_after: int = args.kill_after
        # The emitter first: its init_transactions aborts what a killed predecessor left open.
        self.emitter = OutboxEmitter(
            KafkaContext.from_environment(args.bootstrap), transactional_id=args.transactional_id, topic=args.outbox
        )
        config = {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            # A killed predecessor's membership lapses after this; then the restarted service gets its partitions.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        }
        self.consumer: Consumer = (
            TransactionalConsumer(config)
            if args.offsets == "in-transaction"
            else Consumer({**config, "enable.auto.commit": False, "isolation.level": "read_committed"})
        )
        self.transactions = 0

    def emit_exactly_once(self, batch: list[Message]) -> None:
        """The requests and the input offsets in one transaction (the loop of docs/outbox.md)."""
        assert isinstance(self.consumer, TransactionalConsumer)
        with self.emitter.transaction(self.consumer):
            for message in batch:
                self.emitter.emit(decide(message))
            if self.killing("transaction-open"):
                self.emitter.flush()  # the requests are in the log ...
                self.emitter.send_offsets()  # ... and the offsets sent: only the commit is missing
                print(f"open {len(batch)}", flush=True)
                die()
        print(f"committed {len(batch)}", flush=True)
        if self.killing("between-commits") or self.killing("before-offset-commit"):
            die()

    def emit_then_commit_offsets(self, batch: list[Message]) -> None:
        """The old way, on the emitter's API as it was: the requests' transaction, then the offsets on their own."""
        with self.emitter.transaction():
            for message in batch:
                self.emitter.emit(decide(message))
            if self.killing("transaction-open"):
                self.emitter.flush()
                print(f"open {len(batch)}", flush=True)
                die()
        print(f"committed {len(batch)}", flush=True)
        if self.killing("before-offset-commit"):
            die()
        self.consumer.commit(asynchronous=False)
        if self.killing("between-commits"):
            die()

    def killing(self, point: str) -> bool:
        return self.kill_at == point and self.transactions == self.kill_after

    def run(self, input_topic: str, batch_size: int) -> None:
        """Until every assigned input partition is read to its end."""
        emit = (
            self.emit_exactly_once
            if isinstance(self.consumer, TransactionalConsumer)
            else self.emit_then_commit_offsets
        )
        self.consumer.subscribe([input_topic])
        at_end: set[tuple[str, int]] = set()
        while True:
            batch = []
            for message in self.consumer.consume(batch_size, timeout=1.0):
                error, place = message.error(), (message.topic() or "", message.partition() or 0)
                if error is None:
                    batch.append(message)
                    at_end.discard(place)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(place)
                else:
                    raise SystemExit(f"consuming {input_topic} failed: {error.str()}")
            if batch:
                self.transactions += 1
                try:
                    emit(batch)
                except OutboxDeliveryError as exc:
                    if exc.fatal:
                        raise
                    at_end.clear()  # aborted and rewound: the batch is read again
                    continue
            assigned = {(p.topic, p.partition) for p in self.consumer.assignment()}
            if assigned and assigned <= at_end:
                break
        self.consumer.close()
        self.emitter.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--outbox", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--offsets", choices=("in-transaction", "after-commit"), default="in-transaction")
    parser.add_argument("--kill-at", choices=KILL_POINTS, default="none")
    parser.add_argument("--kill-after", type=int, default=2, help="kill in (or after) this transaction, from 1")
    args = parser.parse_args(argv)
    Service(args).run(args.input, args.batch)


if __name__ == "__main__":
    main()

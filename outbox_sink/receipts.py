"""Reading receipts back from ``outbox.receipts``: what happened to each side effect, event-driven.

The sink writes a receipt per final outcome, at least once: after a Connect task restart a
request may be delivered again (same Idempotency-Key) and receipted again, and a dead-lettered
request replayed from the DLQ is receipted again. The reader keeps one receipt per effect,
(``Receipt.effect_ref``: ``decision_id``, the kind of effect — named by the request or its target
+ path — and the effect's name; one decision may ask for several side effects, and an explicit
effect ``api/ok/1`` is not the default effect of target ``api``, path ``/ok/1``) and when two
disagree believes ``prevailing``: DELIVERED wins (the effect happened), otherwise the first.
Repeats are counted in ``duplicates``, corrections (a DEAD_LETTERED replaced by a DELIVERED) in
``corrected``.

The reader is incremental: its consumer keeps its position between calls, so each ``poll`` reads
only what arrived since the last one, and it remembers the verdicts of the last ``remember``
effects, not the whole topic. "DELIVERED wins" holds within that window only: a DEAD_LETTERED
receipt of an effect whose DELIVERED receipt was forgotten (``forgotten`` counts them; a new or
restarted reader has forgotten everything before it) is returned as news. A service that acts on
DEAD_LETTERED (compensates, alerts) keeps its own durable verdict per ``effect_ref``
and applies ``prevailing`` to it, or sizes ``remember`` above the effects receipted between a
delivery and its latest possible redelivery (docs/outbox.md). Where it starts:

* without ``group_id``: at ``start`` — ``"earliest"`` (every receipt on the topic) or
  ``"latest"`` (only receipts committed after the reader was created; the position is fixed in
  the constructor, so a request emitted after it cannot be missed). Nothing is committed.
* with ``group_id``: where the group's committed offsets say (``start`` only for a new group). A
  receipt's offset is committed once the caller comes back for more (the next ``poll``, a
  ``wait_for`` that reads on, ``close``), never when it is read: a crash re-delivers the receipts
  of the last call instead of skipping them. (A ``wait_for`` answered from what was already read
  reads nothing and commits nothing.)

A record that is no receipt (it does not decode) is never skipped silently, and never stops
the reader: not its neighbours, not its partition, not the other partitions. The receipts read
before it are handed back first; then, without ``on_bad_record``, the next call raises
``BadReceiptError`` for it (with the bad records right after it: topic, partition, offset and
problem of each, bounded) and has read past them, so the call after goes on on every partition.
With a group, a bad record's offset is committed once the caller comes back for more after the
error, like a returned receipt's (a caller that dies with the error in hand reads it again).
With ``on_bad_record``, the reader hands each bad record to it as a ``BadReceipt`` (topic,
partition, offset, key, value, problem) and reads on without raising; its offset is committed
like a returned receipt's. If the callback raises, the reader stays at the record as if there
were none, and the callback's exception goes on.

The reader takes the cluster as a ``KafkaContext``, resolved once where the service starts
(``KafkaContext.from_environment(address)``); a bare address is refused (``ConfigError``).
It reads with ``read_committed`` (``KafkaContext.consumer_config``); ``consumer_config``
adds client settings with Kafka's own names (``security.protocol``, ``sasl.*``, ``ssl.*``), which
are handed to the client and never printed.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.masking import shown_error
from ikkai.contract.outbox import RECEIPT_SCHEMA, EffectRef, Receipt, prevailing
from ikkai.contract.topics import OUTBOX_RECEIPTS
from ikkai.contract.wire_format import environment_codec
from ikkai.errors import ConfigError
from outbox_sink.errors import BadReceiptError, ReceiptReadError

Start = Literal["earliest", "latest"]
K = TypeVar("K", bound=Hashable)

POLL_S = 0.5  # how long one poll inside ``wait_for`` waits, at most
# Consumer settings the reader decides itself; the "what to do" when a caller's config names one.
READER_OWNS = {
    "group.id": "pass group_id= instead",
    "enable.auto.commit": "the reader commits a receipt's offset once the caller comes back for more; drop it",
    "enable.auto.offset.store": "the reader stores offsets itself; drop it",
    "auto.offset.reset": "pass start='earliest' or start='latest' instead",
}


@dataclass(frozen=True)
class BadReceipt:
    """A record of the receipts topic that is no receipt, as ``on_bad_record`` gets it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    problem: str


def decode_receipt(value: bytes, codec: RecordCodec | None = None) -> Receipt:
    return Receipt.from_record((codec or environment_codec()).decode(RECEIPT_SCHEMA, value))


def reader_config(
    cluster: KafkaContext, group_id: str | None, start: Start, extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The receipts consumer's settings: read_committed, ``extra`` passed through, the reader's own keys refused."""
    source = "ReceiptReader consumer_config"
    cluster = KafkaContext.of(cluster, "ReceiptReader")
    extra = dict(extra or {})
    for key, fix in READER_OWNS.items():
        if key in extra:
            raise ConfigError(source, key, "is set by the reader", fix=fix)
    if "bootstrap.servers" in extra and extra["bootstrap.servers"] != cluster.bootstrap_servers:
        raise ConfigError(source, "bootstrap.servers", "differs from the cluster argument", fix="name the cluster once")
    isolation = str(extra.get("isolation.level", "read_committed")).strip().lower()
    if isolation != "read_committed":
        raise ConfigError(
            source, "isolation.level", "must be read_committed", fix="a receipt of an aborted write is no receipt"
        )
    if start not in ("earliest", "latest"):
        raise ConfigError("ReceiptReader", "start", f"is {start!r}", fix="'earliest' or 'latest'")
    group = group_id or f"ikkai.receipts.{uuid.uuid4().hex[:12]}"
    settings = {"auto.offset.reset": start, "enable.auto.commit": group_id is not None}
    if group_id is not None:
        settings["enable.auto.offset.store"] = False  # stored when the caller comes back for more
    return cluster.consumer_config(group, **{**extra, **settings})


class ReceiptReader:
    """A read_committed consumer of receipts that reads on from where it stopped (see the module docstring).

    ``poll`` returns the receipts that arrived since the last call and are new or change the
    verdict on their effect; iterating over the reader does the same forever. ``wait_for``,
    ``wait_for_effects`` and ``wait_for_targets`` poll until the receipts asked for are there.
    ``seen`` holds the prevailing receipt of each of the last ``remember`` effects.
    """

    def __init__(
        self,
        cluster: KafkaContext,
        *,
        topic: str = OUTBOX_RECEIPTS,
        group_id: str | None = None,
        codec: RecordCodec | None = None,
        start: Start = "earliest",
        consumer_config: Mapping[str, Any] | None = None,
        remember: int = 100_000,
        timeout_s: float = 30.0,
        on_bad_record: Callable[[BadReceipt], None] | None = None,
    ) -> None:
        if remember < 1:
            raise ConfigError("ReceiptReader", "remember", f"is {remember}", fix="keep at least one effect")
        self.topic = topic
        self.remember = remember
        self._codec = codec or environment_codec()
        self._grouped = group_id is not None
        self._consumer = Consumer(reader_config(cluster, group_id, start, consumer_config))
        self._pending: dict[int, int] = {}  # partition -> next offset, read but not yet handed back (grouped only)
        self._on_bad_record = on_bad_record
        self._deferred: list[Exception] = []  # raised by the next reads, in order: neighbours first
        self._closed = False
        self.seen: OrderedDict[EffectRef, Receipt] = OrderedDict()  # prevailing receipt per effect, oldest first
        self.duplicates = 0  # receipts that changed nothing (redeliveries after a restart)
        self.corrected = 0  # DEAD_LETTERED receipts replaced by a later DELIVERED one
        self.forgotten = 0  # effects dropped from ``seen`` (the window): a later receipt of one is news again
        try:
            if self._grouped:
                self._consumer.subscribe([topic])
            else:
                self._consumer.assign(self._start_positions(start, timeout_s))
        except (KafkaException, ReceiptReadError):
            self._consumer.close()
            raise

    # -- reading -------------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0) -> list[Receipt]:
        """Receipts that arrived within ``timeout_s`` and are new or change the verdict on their effect."""
        self._hand_back()
        return self._read(timeout_s)

    def __iter__(self) -> Iterator[Receipt]:
        """Every new or changed receipt as it arrives, until the reader is closed (or raises: a
        ``BadReceiptError`` ends the loop, and iterating again reads on past the bad records)."""
        while not self._closed:
            yield from self.poll(1.0)

    def wait_for(self, decision_ids: str | Iterable[str], timeout_s: float) -> dict[str, Receipt]:
        """Poll until every decision has a receipt or ``timeout_s`` passed; one receipt of each decision found.

        Receipts already seen count; a decision with several side effects is found with the
        first one's receipt (``wait_for_effects`` waits for each).
        """
        wanted = {decision_ids} if isinstance(decision_ids, str) else set(decision_ids)
        return self._wait(wanted, lambda r: r.decision_id, timeout_s)

    def wait_for_effects(self, wanted: Iterable[tuple[str, str]], timeout_s: float) -> dict[tuple[str, str], Receipt]:
        """Like ``wait_for`` for decisions with several side effects: by (decision_id, effect_id).

        By name: an explicit and a default effect of one name (``Receipt.effect_ref`` tells them
        apart, and ``seen`` keeps both) are found with either one's receipt.
        """
        return self._wait(set(wanted), lambda r: (r.decision_id, r.effect_id), timeout_s)

    def wait_for_targets(self, wanted: Iterable[tuple[str, str]], timeout_s: float) -> dict[tuple[str, str], Receipt]:
        """By (decision_id, target), for decisions asking at most one side effect of each target."""
        return self._wait(set(wanted), lambda r: (r.decision_id, r.target), timeout_s)

    def close(self) -> None:
        """Commit what was handed back (with a group) and leave."""
        if self._closed:
            return
        self._closed = True
        try:
            self._hand_back()
        finally:
            self._consumer.close()  # with a group: commits the stored offsets

    def __enter__(self) -> ReceiptReader:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:  # the caller failed with the last receipts in hand: they are read again
            self._pending.clear()
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _start_positions(self, start: Start, timeout_s: float) -> list[TopicPartition]:
        """Every partition of the topic at its start, or at its end as a read_committed reader sees it now."""
        metadata = self._consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            problem = metadata.error.str() if metadata is not None and metadata.error is not None else "no partitions"
            raise ReceiptReadError(self.topic, problem)
        positions = []
        for partition in sorted(metadata.partitions):
            offset = OFFSET_BEGINNING
            if start == "latest":  # read_committed: the last stable offset, so nothing committed later is missed
                _, offset = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=timeout_s
                )
            positions.append(TopicPartition(self.topic, partition, offset))
        return positions

    def _read(self, timeout_s: float) -> list[Receipt]:
        """The new or changed receipts of one consumed batch, or the bad records it starts with.

        Receipts and bad records (no receipt) never go back to the caller in one call: a batch's
        receipts up to its first bad record are returned, and the bad record is read again by the
        next call; a batch that starts with bad records reports them in one ``BadReceiptError``
        and has read past them (their offsets handed back when the caller comes back, like a
        receipt's). A record that stops the batch (a consumer error, a callback that raises) is
        raised the same way, at once or by the next call. Whatever a call does not hand back is
        put back (the partitions sought to it): not believed, not returned, not committed.
        """
        if self._deferred:
            raise self._deferred.pop(0)
        fresh: list[Receipt] = []
        bad: list[BadReceipt] = []
        stop: Exception | None = None
        messages = self._consumer.consume(500, timeout_s)
        for at, message in enumerate(messages):
            try:
                taken = self._take(message)
            except Exception as exc:  # noqa: BLE001 - raised below (now, or by the next call: neighbours first)
                self._put_back(messages[at:])
                stop = exc
                break
            if (isinstance(taken, BadReceipt) and fresh) or (isinstance(taken, Receipt) and bad):
                self._put_back(messages[at:])  # what came before goes to the caller first; this is read again
                break
            if isinstance(taken, BadReceipt):
                bad.append(taken)
            elif taken is not None and self._believe(taken):
                fresh.append(taken)
            if self._grouped and message.error() is None:
                self._pending[message.partition() or 0] = (message.offset() or 0) + 1
        errors: list[Exception] = (
            [BadReceiptError(self.topic, [(b.partition, b.offset, b.problem) for b in bad])] if bad else []
        )
        errors += [stop] if stop is not None else []
        if errors and not fresh:
            self._deferred = errors[1:]
            raise errors[0]
        self._deferred = errors
        return fresh

    def _take(self, message: Message) -> Receipt | BadReceipt | None:
        """The receipt in ``message``; a ``BadReceipt`` to report if it is none and there is no ``on_bad_record``;
        None for an end-of-partition event, a tombstone, or a bad record handed to ``on_bad_record``."""
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise ReceiptReadError(self.topic, error.str())
            return None
        value = message.value()
        if value is None:
            return None
        try:
            return decode_receipt(value, self._codec)
        except Exception as exc:  # noqa: BLE001 - untrusted bytes: any decoder failure is this record's, reported
            problem = shown_error(exc, limit=500)  # card-number-like digits masked, then cut
            bad = BadReceipt(self.topic, message.partition() or 0, message.offset() or 0, message.key(), value, problem)
            if self._on_bad_record is None:
                return bad
            self._on_bad_record(bad)
            return None

    def _put_back(self, messages: Sequence[Message]) -> None:
        """Seek each partition of ``messages`` back to its first one: they are read again, none skipped."""
        first: dict[int, int] = {}
        for message in messages:
            offset = message.offset()
            if message.error() is None and offset is not None and offset >= 0:
                first.setdefault(message.partition() or 0, offset)
        try:
            for partition, offset in first.items():
                self._consumer.seek(TopicPartition(self.topic, partition, offset))
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            raise ReceiptReadError(self.topic, f"putting unread records back failed: {error.str()}") from exc

    def _believe(self, receipt: Receipt) -> bool:
        """Record ``receipt`` under its effect; whether it is new or changes the verdict."""
        effect = receipt.effect_ref
        current = self.seen.get(effect)
        if current is not None:
            if prevailing(current, receipt) is current:
                self.duplicates += 1
                return False
            self.corrected += 1
        self.seen[effect] = receipt
        self.seen.move_to_end(effect)
        while len(self.seen) > self.remember:
            self.seen.popitem(last=False)
            self.forgotten += 1
        return True

    def _wait(self, wanted: set[K], key: Callable[[Receipt], K], timeout_s: float) -> dict[K, Receipt]:
        """Poll until a receipt of every wanted key arrived (or was seen) or ``timeout_s`` passed."""
        found: dict[K, Receipt] = {}

        def take(receipt: Receipt) -> None:
            k = key(receipt)
            held = found.get(k)
            if k in wanted and (held is None or held.effect_ref == receipt.effect_ref):  # a correction replaces
                found[k] = receipt

        for receipt in self.seen.values():
            take(receipt)
        deadline = time.monotonic() + timeout_s
        reading = False
        while not wanted <= found.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not reading:  # reading on: what the last call returned is handled (a mere lookup is not)
                self._hand_back()
                reading = True
            for receipt in self._read(min(POLL_S, left)):
                take(receipt)
        return found

    def _hand_back(self) -> None:
        """Store the offsets of what the last call read: the caller is back, so it has handled them."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for partition, offset in pending.items():
            try:
                self._consumer.store_offsets(offsets=[TopicPartition(self.topic, partition, offset)])
            except KafkaException as exc:  # the partition went to another member in a rebalance: it reads it again
                error: KafkaError = exc.args[0]
                if error.code() != KafkaError._STATE:
                    raise ReceiptReadError(self.topic, error.str()) from exc

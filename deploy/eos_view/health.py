"""The exactly-once health of a cluster's queries, as the operator page shows it: per query and output
partition the last committed commit marker, and whether a transaction is open, or stuck, on it.

Every query keeps its markers on its own compacted topic ``_ikkai.commits.<app>.<query>``, one partition per
output partition, written in the same transaction as the output they vouch for (``ikkai.contract.markers``).
A sample, taken at most every ``SAMPLE_SECONDS`` per cluster however many look (``ikkai serve`` takes one every
``--health-interval`` seconds in the background, whether or not anyone looks), costs:

- one metadata request (which commits topics exist, and their partitions);
- three batched ListOffsets requests for at most ``MAX_PARTITIONS`` commits partitions (the rest are counted
  as left out, never read): the earliest offset, the read_committed end (the last stable offset, LSO) and
  the read_uncommitted end (the high watermark, HW);
- one read_committed consumer that reads, per partition, only the last ``LOOKBACK`` offsets before its LSO
  (each transaction there is one marker and one commit control record, so the last committed marker is
  within them unless more than ``LOOKBACK / 2`` transactions in a row were aborted) and keeps the newest;
  it stops at every partition's end or after ``TIMEOUT_SECONDS``.

So the cost is bounded by ``MAX_PARTITIONS`` times ``LOOKBACK`` records, not by the topics' history or traffic.

The same sample, after the markers and within one more ``TIMEOUT_SECONDS``, reads what the markers lead to,
each bounded in its own module and shown with its own problem when its reads fail: the consumer lag of the
queries (from their markers) and of the Connect sinks (``deploy.eos_view.consumer_lag``), the recent dead
letters by reason (``deploy.eos_view.dead_letter_reasons``), the outbox's reconciliation
(``deploy.eos_view.reconciliation``) and the events without a decision (``deploy.eos_view.event_decisions``).

Open transactions: where a partition's LSO is below its HW, a transaction is open there (a writer began it
and has not committed or aborted yet). A writer commits a batch within seconds; one that stays open with
the same LSO for two samples or more and longer than ``STUCK_SECONDS`` (Kafka's default
``transaction.timeout.ms``, after which the broker aborts it) is shown as stuck: read_committed readers of
that partition, and of the output topics the same transaction writes, wait behind it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from deploy.eos_view.consumer_lag import Lags, read_lags, sink_committed
from deploy.eos_view.dead_letter_reasons import DeadLetters, read_dead_letters
from deploy.eos_view.event_decisions import EventDecisions, read_event_decisions
from deploy.eos_view.group_offsets import GroupOffsetsUnreadable, in_child
from deploy.eos_view.reconciliation import Reconciliation, read_reconciliation
from deploy.kafka_windows import Deadline
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker, app_and_query
from ikkai.contract.partition_ends import records_to_end
from ikkai.contract.wire_format import environment_codec
from ikkai.errors import IkkaiError

SAMPLE_SECONDS = 5.0
MAX_PARTITIONS = 256  # commits partitions read per sample; more are counted as left out
LOOKBACK = 32  # offsets before a partition's read_committed end searched for its last marker
STUCK_SECONDS = 60.0  # Kafka's default transaction.timeout.ms
TIMEOUT_SECONDS = 10.0
log = logging.getLogger("ikkai.serve.eos_health")  # librdkafka's own complaints (a broker down) go here

Where = tuple[str, int]  # (commits topic, partition)


class HealthUnreadable(IkkaiError):
    """The cluster did not answer the metadata, offsets or marker reads."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"Kafka at {where}: commit markers unreadable: {reason}", fix="is it up? `ikkai stack status`")
        self.where = where
        self.reason = reason


class _NotReadToEnd(Exception):
    """Partitions that did not report their end within the deadline (``records_to_end``'s ``late``)."""

    def __init__(self, pending: set[Where]) -> None:
        super().__init__(f"{len(pending)} partition(s) not read to their end")
        self.pending = pending


@dataclass(frozen=True)
class Ends:
    """A commits partition's offsets: earliest, read_committed end (LSO) and read_uncommitted end (HW)."""

    earliest: int
    committed: int
    high: int

    @property
    def open(self) -> bool:
        """A transaction is open here: records beyond the last stable offset are not decided yet."""
        return self.committed < self.high


@dataclass(frozen=True)
class OpenTransaction:
    """An open transaction as seen over samples: where the LSO stood, since when, in how many samples."""

    committed: int
    since: float  # wall-clock seconds of the first sample that saw it
    samples: int = 1

    def stuck(self, now: float, stuck_seconds: float = STUCK_SECONDS) -> bool:
        return self.samples >= 2 and now - self.since >= stuck_seconds


def open_transactions(
    before: Mapping[Where, OpenTransaction], ends: Mapping[Where, Ends], now: float
) -> dict[Where, OpenTransaction]:
    """The open transactions after a sample. Pure.

    An open partition whose LSO did not move since the last sample is the same transaction, still open;
    an LSO that moved means transactions completed in between, and the one open now starts counting anew.
    """
    found: dict[Where, OpenTransaction] = {}
    for where, end in ends.items():
        if not end.open:
            continue
        seen = before.get(where)
        if seen is not None and seen.committed == end.committed:
            found[where] = OpenTransaction(end.committed, seen.since, seen.samples + 1)
        else:
            found[where] = OpenTransaction(end.committed, now)
    return found


@dataclass(frozen=True)
class MarkerRead:
    """The newest committed record of a commits partition within the window read: its offset, value, time."""

    offset: int
    value: bytes
    timestamp_ms: int


def newest(records: Iterable[tuple[Where, MarkerRead]]) -> dict[Where, MarkerRead]:
    """Per partition, the record with the highest offset. Pure."""
    found: dict[Where, MarkerRead] = {}
    for where, record in records:
        if where not in found or record.offset > found[where].offset:
            found[where] = record
    return found


# The newest record read per partition, and the partitions not read to their end in time.
Markers = tuple[dict[Where, MarkerRead], set[Where]]


@dataclass(frozen=True)
class PartitionHealth:
    topic: str
    app: str
    query: str
    partition: int
    ends: Ends
    marker: CommitMarker | None = None
    marker_ms: int | None = None  # the marker record's timestamp (when its transaction wrote it)
    problem: str | None = None  # no marker in the window read, or one that does not decode
    open_transaction: OpenTransaction | None = None
    stuck: bool = False

    def age_seconds(self, now: float) -> float | None:
        return None if self.marker_ms is None else max(0.0, now - self.marker_ms / 1000)


@dataclass(frozen=True)
class Health:
    at: float  # wall-clock seconds of the sample
    partitions: tuple[PartitionHealth, ...] = ()
    left_out: int = 0  # commits partitions beyond MAX_PARTITIONS, not read
    queries: Mapping[tuple[str, str], tuple[PartitionHealth, ...]] = field(default_factory=dict)
    lags: Lags = field(default_factory=Lags)
    dead_letters: DeadLetters = field(default_factory=DeadLetters)
    reconciliation: Reconciliation = field(default_factory=Reconciliation)
    event_decisions: EventDecisions = field(default_factory=EventDecisions)


def health_of(
    at: float,
    names: Mapping[str, tuple[str, str]],
    ends: Mapping[Where, Ends],
    markers: Mapping[Where, MarkerRead],
    transactions: Mapping[Where, OpenTransaction],
    *,
    unread: Collection[Where] = (),
    left_out: int = 0,
    stuck_seconds: float = STUCK_SECONDS,
) -> Health:
    """One sample's health from what was read, grouped by (app, query), partitions in order. Pure.

    ``unread``: partitions whose read did not reach their end in time; what was read of them may not be the last.
    """
    codec = default_codec()
    rows: list[PartitionHealth] = []
    for where in sorted(ends):
        topic, partition = where
        app, query = names[topic]
        marker, problem, read = None, None, markers.get(where)
        if read is None:
            empty = ends[where].committed <= ends[where].earliest
            problem = "no marker yet" if empty else f"no committed marker in the last {LOOKBACK} offsets"
        else:
            try:
                marker = CommitMarker.decode(read.value, codec)
            except IkkaiError as exc:
                problem = f"offset {read.offset} is no commit marker: {str(exc).splitlines()[0]}"
        if where in unread:
            problem = f"not read to its end within {TIMEOUT_SECONDS:.0f} s: a later marker may exist"
        txn = transactions.get(where)
        rows.append(PartitionHealth(
            topic, app, query, partition, ends[where], marker, read.timestamp_ms if read else None, problem, txn,
            txn is not None and txn.stuck(at, stuck_seconds),
        ))  # fmt: skip
    grouped: dict[tuple[str, str], list[PartitionHealth]] = {}
    for row in rows:
        grouped.setdefault((row.app, row.query), []).append(row)
    return Health(at, tuple(rows), left_out, {k: tuple(v) for k, v in sorted(grouped.items())})


def _said(exc: Exception) -> str:
    """The first line of what a failed read said (a timeout says nothing: then that it timed out)."""
    text = str(exc.args[0]) if exc.args else ""
    return (text or f"no answer within {TIMEOUT_SECONDS:.0f} s").splitlines()[0]


class HealthReader:
    """One cluster's exactly-once health, sampled at most every ``sample_seconds``; thread-safe.

    ``ikkai serve`` samples it in the background (``deploy.serve.page.health_sampler``) and its views read the last
    sample (``cached``); without that, a view takes the sample when the last one is due (``sampled``).
    """

    def __init__(
        self,
        kafka: KafkaContext,
        clock: Callable[[], float] = time.time,
        *,
        max_partitions: int | None = None,
        stuck_seconds: float = STUCK_SECONDS,
        sample_seconds: float = SAMPLE_SECONDS,
    ) -> None:
        self.kafka = kafka
        self.clock = clock
        self.sample_seconds = sample_seconds
        self.max_partitions = MAX_PARTITIONS if max_partitions is None else max_partitions
        self.stuck_seconds = stuck_seconds
        self.last: Health | None = None
        self.transactions: dict[Where, OpenTransaction] = {}
        self._lock = threading.Lock()
        self._outcome: Health | HealthUnreadable | None = None  # the last sample, or why it failed
        self._outcome_at = 0.0
        self._admin: AdminClient | None = None
        self._partitions_of: dict[str, list[int]] = {}  # every topic's partitions, from the last metadata read

    def cached(self) -> Health:
        """The last sample as it is (a failed one raises its ``HealthUnreadable`` again); only when none was taken
        yet, the first (``sampled``)."""
        if self._outcome is None:
            return self.sampled()
        return self._last_outcome()

    def sampled(self) -> Health:
        """The last sample, after taking a new one if it is older than ``sample_seconds``.

        Viewers never queue behind a slow sample: while one viewer takes it, the others get the last outcome at
        once (a ``Health`` carries its time, ``at``; a failed sample raises its ``HealthUnreadable`` again). Only
        the very first sample of a reader is waited for, once: whoever waited gets the outcome it produced.
        """
        if not self._lock.acquire(blocking=self._outcome is None):
            return self._last_outcome()
        try:
            now = self.clock()
            if self._outcome is None or now - self._outcome_at >= self.sample_seconds:
                self._outcome_at = now
                try:
                    self._outcome = self._sample(now)
                except HealthUnreadable as exc:
                    self._outcome = exc
            return self._last_outcome()
        finally:
            self._lock.release()

    def _last_outcome(self) -> Health:
        outcome = self._outcome
        if isinstance(outcome, HealthUnreadable):
            raise outcome
        assert outcome is not None
        return outcome

    def _sample(self, now: float) -> Health:
        names, ends, (markers, unread), left_out = self._read()
        self.transactions = open_transactions(self.transactions, ends, now)
        health = health_of(
            now, names, ends, markers, self.transactions, unread=unread, left_out=left_out,
            stuck_seconds=self.stuck_seconds,
        )  # fmt: skip
        self.last = self._around(health)
        return self.last

    def _around(self, health: Health) -> Health:
        """``health`` with the lags, dead letters by reason and the reconciliations read within one more deadline;
        a part whose reads fail says so in its ``problem`` and the rest is still shown."""
        assert self._admin is not None
        deadline = Deadline(TIMEOUT_SECONDS)
        queries = {name: [p.marker for p in rows if p.marker is not None] for name, rows in health.queries.items()}
        lags, letters, reconciliation = Lags(), DeadLetters(), Reconciliation()
        failed = False  # no client lives past a failed read: the next sample makes a new one
        try:
            lags = read_lags(self.kafka, self._admin, self._partitions_of, queries, deadline,
                             in_child(self.kafka.client_config()))  # fmt: skip
        except GroupOffsetsUnreadable as exc:
            lags, failed = Lags(problem=f"consumer lag unreadable: {exc.reason}"), True
        except (KafkaException, TimeoutError) as exc:
            lags, failed = Lags(problem=f"consumer lag unreadable: {_said(exc)}"), True
        try:
            letters = read_dead_letters(self.kafka, self._admin, self._partitions_of, deadline)
        except (KafkaException, TimeoutError) as exc:
            letters, failed = DeadLetters(problem=f"dead letters unreadable: {_said(exc)}"), True
        try:
            reconciliation = read_reconciliation(
                self.kafka, self._admin, self._partitions_of, environment_codec(), int(health.at * 1000), deadline,
                delivered=sink_committed(lags),
            )  # fmt: skip
        except (KafkaException, TimeoutError, IkkaiError) as exc:
            reconciliation, failed = Reconciliation(problem=f"outbox topics unreadable: {_said(exc)}"), True
        try:
            markers = [marker for rows in queries.values() for marker in rows]
            decided = read_event_decisions(
                self.kafka, self._admin, self._partitions_of, markers, environment_codec(), deadline
            )
        except (KafkaException, TimeoutError, IkkaiError) as exc:
            decided, failed = EventDecisions(problem=f"events or decisions unreadable: {_said(exc)}"), True
        if failed or lags.problem:
            self._admin = None
        return replace(health, lags=lags, dead_letters=letters, reconciliation=reconciliation, event_decisions=decided)

    def _read(self) -> tuple[dict[str, tuple[str, str]], dict[Where, Ends], Markers, int]:
        if self._admin is None:
            self._admin = AdminClient(self.kafka.client_config(logger=log))
        try:
            metadata = self._admin.list_topics(timeout=TIMEOUT_SECONDS).topics
            self._partitions_of = {t: sorted(m.partitions) for t, m in metadata.items() if m.error is None}
            names = {t: n for t in metadata if (n := app_and_query(t)) is not None and metadata[t].error is None}
            every = sorted((t, p) for t in names for p in metadata[t].partitions)
            chosen = every[: self.max_partitions]
            ends = self._ends(chosen)
            return names, ends, self._markers(ends), len(every) - len(chosen)
        except KafkaException as exc:
            self._admin = None  # a new client reads fresh metadata (a leader may have moved)
            raise HealthUnreadable(self.kafka.describe(), str(exc.args[0])) from exc

    def _ends(self, partitions: list[Where]) -> dict[Where, Ends]:
        if not partitions:
            return {}
        assert self._admin is not None
        offsets: dict[str, dict[Where, int]] = {}
        asks = {
            "earliest": (OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED),  # type: ignore[no-untyped-call]
            "committed": (OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),  # type: ignore[no-untyped-call]
            "high": (OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),  # type: ignore[no-untyped-call]
        }
        for name, (spec, isolation) in asks.items():
            futures = self._admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in partitions}, isolation_level=isolation,
                request_timeout=TIMEOUT_SECONDS,
            )  # fmt: skip
            offsets[name] = {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
        return {w: Ends(offsets["earliest"][w], offsets["committed"][w], offsets["high"][w]) for w in partitions}

    def _markers(self, ends: Mapping[Where, Ends]) -> Markers:
        """The newest committed record of each partition, read from at most ``LOOKBACK`` offsets before its LSO,
        and the partitions whose read did not reach their end within ``TIMEOUT_SECONDS``."""
        windows = {w: max(e.earliest, e.committed - LOOKBACK) for w, e in ends.items() if e.committed > e.earliest}
        if not windows:
            return {}, set()
        settings: dict[str, Any] = {
            "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 10, "logger": log,
        }  # fmt: skip
        # read_committed comes with consumer_config; the group is never joined (partitions are assigned)
        consumer = Consumer(self.kafka.consumer_config(f"_ikkai.eos-health.{uuid.uuid4().hex}", **settings))
        found: list[tuple[Where, MarkerRead]] = []
        try:
            for message in records_to_end(
                consumer, windows, TIMEOUT_SECONDS, starts=windows, failed=lambda _, error: KafkaException(error),
                late=_NotReadToEnd,
            ):  # fmt: skip
                where = (message.topic(), message.partition())
                found.append((where, MarkerRead(message.offset(), message.value(), message.timestamp()[1])))
            return newest(found), set()
        except _NotReadToEnd as late:
            return newest(found), late.pending
        finally:
            consumer.close()

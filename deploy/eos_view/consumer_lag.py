"""Consumer lag of the exactly-once queries and of the Kafka Connect sinks, as the health view shows it.

Lag is, per input partition, the partition's read_committed end offset (its last stable offset, LSO) minus
the next offset its reader has committed: the records a read_committed reader could read now and whose
outcome is not committed yet. The LSO, not the high watermark: the jobs and the outbox sink read
read_committed, so records of a transaction still open are not theirs to read yet (and may be aborted);
counting them would show lag where there is none to catch up.

- **A query** (the Spark jobs) uses no consumer group: its progress is in its commit markers. Each output
  partition's marker records, per input partition, the next input offset whose output for that partition is
  committed (``ikkai.contract.markers``). A batch commits every output partition within seconds, and an
  output partition that gets no record of a batch keeps its older marker, so the query's committed offset of
  an input partition is the **highest** any of its markers records (the slowest would show an idle output
  partition as lag forever).
- **A sink connector** commits its offsets in its consumer group, ``connect-<connector name>``.

On a transactional input each transaction ends in a commit control record that takes an offset (and an aborted
transaction's records take theirs), so end minus committed counts offsets no reader will ever read: a reader
that is caught up commits the offset of the control record after its last record, one below the end. So where
the gap is at most ``COUNTED_GAP`` offsets, its records are read (read_committed) and counted: the lag is the
records left to read, 0 when caught up. A wider gap shows end minus committed, control records included (at
most one per transaction), and so does a gap not read within the sample's deadline.

Cost per sample: one batched ListOffsets for the input partitions (at most ``MAX_PARTITIONS``), the
``connect-*`` groups' committed offsets (at most ``MAX_GROUPS``, in name order) read in a short-lived child
process (``deploy.eos_view.group_offsets``, which says why), and one read_committed consumer that reads the gaps
of at most ``COUNTED_GAP`` offsets (``deploy.kafka_windows.last_records``: deadline and byte budget).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, OffsetSpec

from deploy.eos_view.group_offsets import SINK_GROUP_PREFIX, GroupReader
from deploy.kafka_windows import Deadline, Where, last_records, offsets
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker

MAX_GROUPS = 32
MAX_PARTITIONS = 256
COUNTED_GAP = 100  # a gap between committed and end of at most this many offsets is read to count its records

# Per input partition, the gap read: (the offset its read started at, the offsets of the committed records read)
Gaps = Mapping[Where, tuple[int, Sequence[int]]]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    end: int | None  # read_committed end (LSO); None: not read
    committed: int | None  # the next offset the reader has committed; None: nothing committed yet
    left: int | None = None  # records between committed and end, counted; None: not counted (a wide gap)

    @property
    def lag(self) -> int | None:
        if self.end is None or self.committed is None:
            return None
        return self.left if self.left is not None else max(0, self.end - self.committed)

    @classmethod
    def of(cls, where: Where, end: int | None, committed: int | None, gaps: Gaps) -> PartitionLag:
        """The lag of a reader at ``committed``, its records counted when a gap read from there covers it. Pure."""
        read = gaps.get(where)
        left = None
        if read is not None and committed is not None and read[0] <= committed:
            left = sum(1 for offset in read[1] if offset >= committed)
        return cls(where[0], where[1], end, committed, left)


@dataclass(frozen=True)
class ConsumerLag:
    kind: Literal["query", "sink"]
    name: str  # app.query, or the connector's name
    partitions: tuple[PartitionLag, ...]
    state: str = ""  # a sink's consumer group state (STABLE: tasks consume; EMPTY: none runs)

    @property
    def total(self) -> int | None:
        known = [p.lag for p in self.partitions if p.lag is not None]
        return sum(known) if known else None


@dataclass(frozen=True)
class Lags:
    queries: tuple[ConsumerLag, ...] = ()
    sinks: tuple[ConsumerLag, ...] = ()
    left_out: int = 0  # input partitions or connect-* groups beyond the bounds, not read
    problem: str | None = None  # the reads failed: nothing shown


Progress = dict[tuple[str, str], tuple[str, dict[int, int]]]  # (app, query) -> (input topic, partition -> offset)


def query_progress(queries: Mapping[tuple[str, str], Iterable[CommitMarker]]) -> Progress:
    """Per query: its input topic and, per input partition, the highest next offset any marker records. Pure."""
    found: Progress = {}
    for name, markers in queries.items():
        for marker in markers:
            if not marker.source_topic:
                continue
            topic, committed = found.setdefault(name, (marker.source_topic, {}))
            if marker.source_topic != topic:
                continue  # the sink refuses markers of another input; the first seen is shown
            for partition, offset in marker.source_offsets.items():
                committed[partition] = max(committed.get(partition, offset), offset)
    return found


def query_lags(
    progress: Mapping[tuple[str, str], tuple[str, Mapping[int, int]]],
    ends: Mapping[Where, int],
    partitions_of: Mapping[str, Sequence[int]],
    gaps: Gaps | None = None,
) -> list[ConsumerLag]:
    """Each query's lag on every partition of its input (from the metadata; else the ones its markers name). Pure."""
    lags = []
    for (app, query), (topic, committed) in sorted(progress.items()):
        numbers = sorted(set(partitions_of.get(topic, ())) | set(committed))
        rows = tuple(PartitionLag.of((topic, p), ends.get((topic, p)), committed.get(p), gaps or {}) for p in numbers)
        lags.append(ConsumerLag("query", f"{app}.{query}", rows))
    return lags


def sink_lags(
    groups: Mapping[str, tuple[str, Mapping[Where, int]]], ends: Mapping[Where, int], gaps: Gaps | None = None
) -> list[ConsumerLag]:
    """Each sink connector's lag from its group's committed offsets: group id → (state, committed). Pure."""
    return [
        ConsumerLag("sink", group.removeprefix(SINK_GROUP_PREFIX),
                    tuple(PartitionLag.of(w, ends.get(w), o, gaps or {}) for w, o in sorted(committed.items())), state)
        for group, (state, committed) in sorted(groups.items())
    ]  # fmt: skip


def sink_committed(lags: Lags) -> dict[Where, int]:
    """Per input partition, the highest offset any sink connector's group committed. Pure."""
    found: dict[Where, int] = {}
    for sink in lags.sinks:
        for p in sink.partitions:
            if p.committed is not None:
                where = (p.topic, p.partition)
                found[where] = max(found.get(where, p.committed), p.committed)
    return found


def gaps_to_count(committed: Iterable[tuple[Where, int]], ends: Mapping[Where, int]) -> dict[Where, tuple[int, int]]:
    """Per partition, the window to read: from the lowest committed offset of its readers at most ``COUNTED_GAP``
    offsets behind its end (and behind it at all), to its end. Pure."""
    lowest: dict[Where, int] = {}
    for where, offset in committed:
        if where in ends and 0 < ends[where] - offset <= COUNTED_GAP:
            lowest[where] = min(lowest.get(where, offset), offset)
    return {w: (o, ends[w]) for w, o in lowest.items()}


def read_lags(
    kafka: KafkaContext,
    admin: AdminClient,
    partitions_of: Mapping[str, Sequence[int]],
    queries: Mapping[tuple[str, str], Iterable[CommitMarker]],
    deadline: Deadline,
    groups: GroupReader,
    *,
    max_groups: int = MAX_GROUPS,
) -> Lags:
    """The lags of the queries whose markers are given and of the first ``max_groups`` ``connect-*`` groups.

    ``groups`` reads the groups' committed offsets (``deploy.eos_view.group_offsets``: in a child process, where
    an abort inside librdkafka cannot end this one); the end offsets are read here with ``admin``, and the narrow
    gaps' records with a consumer of ``kafka``."""
    progress = query_progress(queries)
    sinks = groups(deadline, max_groups)
    wanted = sorted({(t, p) for t, _ in progress.values() for p in partitions_of.get(t, ())}
                    | {w for _, committed in sinks.groups.values() for w in committed})  # fmt: skip
    wanted = [w for w in wanted if w[0] in partitions_of]  # a deleted topic has no end to ask for
    try:
        ends = offsets(admin, wanted[:MAX_PARTITIONS], OffsetSpec.latest(), deadline)  # type: ignore[no-untyped-call]
    except KafkaException as exc:
        return Lags(problem=f"end offsets unreadable: {exc.args[0]}")
    left_out = max(0, len(wanted) - MAX_PARTITIONS) + sinks.left_out
    readers = [((t, p), o) for t, committed in progress.values() for p, o in committed.items()]
    readers += [(w, o) for _, committed in sinks.groups.values() for w, o in committed.items()]
    windows = gaps_to_count(readers, ends)
    records, unread = last_records(kafka, windows, deadline)  # what was not read in time is not counted
    gaps = {w: (start, [r.offset for r in records if (r.topic, r.partition) == w])
            for w, (start, _) in windows.items() if w not in unread}  # fmt: skip
    return Lags(tuple(query_lags(progress, ends, partitions_of, gaps)), tuple(sink_lags(sinks.groups, ends, gaps)),
                left_out)  # fmt: skip

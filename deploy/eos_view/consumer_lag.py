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

On a transactional input each transaction ends in a commit control record that takes an offset, so a reader
that is caught up may show a lag of 1 (the control record after the last record it read).
Cost per sample: one batched ListOffsets for the input partitions (at most ``MAX_PARTITIONS``), and the
``connect-*`` groups' committed offsets (at most ``MAX_GROUPS``, in name order) read in a short-lived child
process (``deploy.eos_view.group_offsets``, which says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, OffsetSpec

from deploy.eos_view.group_offsets import SINK_GROUP_PREFIX, GroupReader
from deploy.kafka_windows import Deadline, Where, offsets
from ikkai.contract.markers import CommitMarker

MAX_GROUPS = 32
MAX_PARTITIONS = 256


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    end: int | None  # read_committed end (LSO); None: not read
    committed: int | None  # the next offset the reader has committed; None: nothing committed yet

    @property
    def lag(self) -> int | None:
        return None if self.end is None or self.committed is None else max(0, self.end - self.committed)


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
) -> list[ConsumerLag]:
    """Each query's lag on every partition of its input (from the metadata; else the ones its markers name). Pure."""
    lags = []
    for (app, query), (topic, committed) in sorted(progress.items()):
        numbers = sorted(set(partitions_of.get(topic, ())) | set(committed))
        rows = tuple(PartitionLag(topic, p, ends.get((topic, p)), committed.get(p)) for p in numbers)
        lags.append(ConsumerLag("query", f"{app}.{query}", rows))
    return lags


def sink_lags(groups: Mapping[str, tuple[str, Mapping[Where, int]]], ends: Mapping[Where, int]) -> list[ConsumerLag]:
    """Each sink connector's lag from its group's committed offsets: group id → (state, committed). Pure."""
    return [
        ConsumerLag("sink", group.removeprefix(SINK_GROUP_PREFIX),
                    tuple(PartitionLag(t, p, ends.get((t, p)), o) for (t, p), o in sorted(committed.items())), state)
        for group, (state, committed) in sorted(groups.items())
    ]  # fmt: skip


def read_lags(
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
    an abort inside librdkafka cannot end this one); the end offsets are read here with ``admin``."""
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
    return Lags(tuple(query_lags(progress, ends, partitions_of)), tuple(sink_lags(sinks.groups, ends)), left_out)

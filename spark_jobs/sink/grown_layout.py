"""A query that continues one of another partition count (the topics grew): where it starts, what it leaves out.

The markers' layout is pinned (an output partition's marker vouches for what its writer wrote with
that count), so a grown layout is a new query that takes over from the old one (``--after-query``,
which fences it and moves its claim). The old query's markers say, per *old* output partition q, the
input offsets below which q holds everything. A record's output went to q by the old layout:

- written in place, or by a job whose every output key maps to its input record's partition
  (``outputs_follow_input``: enrich), q is the record's input partition, so each input partition has
  one marker that is exact for it;
- routed by key otherwise, q is Kafka's default partition of the output key among the old count
  (``kafka_partition``, the sink's own routing). A batch committed on one output partition and not on
  another leaves no single offset per input partition below which everything is committed and above
  which nothing is: the lowest skips nothing but would write again what the higher ones committed.

So the new query needs no offsets from anyone: ``OriginLayout`` holds the old markers (read at
every start, after the handover made them final: ``query_handover.take_over``), each of its
writers starts where every old partition committed (``start``) and leaves out each record its old
partition committed (``holds``), on every start and every write path (``partition_transactions.uncommitted``).
Nothing is skipped and nothing is written again. Pure, but for the refusal's wording.

The checks of the markers a start read live here too, pure: a grown layout (``refuse_a_grown_layout``), before
the start touches a topic; once the topics are checked, a marker of another layout or input (``check_markers``,
which every writer that reads its marker runs as well), a handover done, other output topics
(``refuse_by_own_markers``); and where
each output partition of any query starts, from its marker and its origin's (``start_of``: the same layout,
a grown one, ``--start-offsets``, or a recreated input the operator accepted, ``on_accepted_recreation``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from ikkai.contract.owner_claims import OwnerClaimError
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.sink.commit_markers import CommitMarker, CommitMarkerError, Lineage, commits_topic_for
from spark_jobs.sink.record import KEY, SOURCE_PARTITION, Record

# What an operator may change, and how (docs/exactly-once.md); adding partitions is one of its procedures.
OPERATOR_GUIDE = "docs/exactly-once.md, 'What an operator may change, and how'"
REPARTITION_PROCEDURE = f"{OPERATOR_GUIDE}: partitions"


@dataclass(frozen=True)
class OriginLayout:
    """What the origin query, of another partition count, committed: per old output partition, its source offsets."""

    partitions: int  # the old count
    committed: Mapping[int, Mapping[int, int]]  # old output partition -> input partition -> offset below: committed
    by_input_partition: bool  # a record's old output partition was its input partition (module docstring)

    def old_partition(self, record: Record) -> int:
        """The output partition the origin wrote ``record`` to (module docstring)."""
        if self.by_input_partition:
            return record[SOURCE_PARTITION]
        return kafka_partition(record[KEY], self.partitions)

    def holds(self, record: Record) -> bool:
        """The origin committed ``record``: its input offset is below its old output partition's marker."""
        _, _, _, _, _, partition, offset = record
        if offset >= self.highest.get(partition, 0):  # above every old marker: no need to route it
            return False
        return offset < self.committed.get(self.old_partition(record), {}).get(partition, 0)

    @cached_property
    def highest(self) -> dict[int, int]:
        """Per input partition, the highest offset any old output partition committed."""
        highest: dict[int, int] = {}
        for offsets in self.committed.values():
            for partition, offset in offsets.items():
                highest[partition] = max(highest.get(partition, 0), offset)
        return highest

    def start(self) -> dict[int, int]:
        """Per input partition, the offsets below which the origin committed every record: where a new writer starts.

        By input partition, that partition's own marker (exact); routed by key, the lowest any old
        output partition committed (0 where one has none): ``holds`` leaves out the rest it committed.
        """
        if self.by_input_partition:
            return {p: self.committed.get(p, {}).get(p, 0) for p in self.highest}
        return {p: min(self.committed.get(q, {}).get(p, 0) for q in range(self.partitions)) for p in self.highest}


def origin_layout(
    markers: Mapping[int, CommitMarker], partitions: int, by_input_partition: bool
) -> OriginLayout | None:
    """The origin's layout if its markers were written with another partition count than ``partitions``, else None."""
    other = [m.partitions for m in markers.values() if m.partitions != partitions]
    if not other:
        return None
    committed = {m.partition: dict(m.source_offsets) for m in markers.values()}
    return OriginLayout(other[0], committed, by_input_partition)


def not_held(records: Sequence[Record], origin: OriginLayout | None) -> list[Record]:
    """``records`` but those the origin of another layout committed."""
    if origin is None:
        return list(records)
    return [record for record in records if not origin.holds(record)]


def handed_over(commits_topic: str, query: str, successor: str) -> tuple[str, str, str]:
    """(topic, problem, fix) refusing a query whose markers say it handed its output over to ``successor``: one text
    for the start's check (``claim_log``) and for each partition writer's (``partition_transactions``)."""
    return (
        commits_topic, f"query {query} handed its output over to query {successor}",
        f"run query {successor} (--query {successor}): it continues where this one stopped; writing here again "
        "would decide its events twice",
    )  # fmt: skip


class _Query(Protocol):
    @property
    def query(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def commits_topic(self) -> str: ...


class _Layout(_Query, Protocol):
    @property
    def source_topic(self) -> str: ...
    @property
    def source_topic_id(self) -> str: ...
    @property
    def output_topics(self) -> Collection[str]: ...


class _Start(_Layout, Protocol):
    @property
    def app(self) -> str: ...
    @property
    def after_query(self) -> str: ...
    @property
    def start_offsets(self) -> Mapping[int, int]: ...
    @property
    def input_recreated(self) -> str: ...
    @property
    def origin_layout(self) -> OriginLayout | None: ...


def refuse_a_grown_layout(
    config: _Query, markers: Mapping[int, CommitMarker], commits_partitions: int | None = None
) -> None:
    """Markers of another partition count: the topics grew. Refused with the command of the query that continues.

    A query that committed no marker yet has its layout only in its commits topic (``commits_partitions``, None where
    it does not exist): fewer partitions there than the topics have now is the same growth, refused the same way.
    The command names no offsets: the new query finds where to start in this query's markers (``OriginLayout``).
    """
    grown = [m.partitions for m in markers.values() if m.partitions != config.partitions]
    if not markers and commits_partitions is not None and commits_partitions < config.partitions:
        grown = [commits_partitions]
    if not grown:
        return
    started = "committed with" if markers else "committed nothing yet and its commits topic has"
    raise CommitMarkerError(
        config.commits_topic,
        f"query {config.query} {started} {grown[0]} partitions, the topics now have {config.partitions}",
        fix=f"run the job as a new query that continues this one: --query {config.query}-p{config.partitions} "
        f"--after-query {config.query} and a fresh --checkpoint; it leaves out every record this query committed, "
        f"by its markers ({REPARTITION_PROCEDURE})",
    )


def refuse_by_own_markers(config: _Layout, own: Mapping[int, CommitMarker]) -> None:
    """What the query's own markers (as the start read them) forbid once its topics are checked, before it claims: a
    marker of another layout or input (``check_markers``), writing again after a handover, other output topics than
    the markers name. A grown layout is refused before any topic is touched (``refuse_a_grown_layout``)."""
    check_markers(config, own)
    for marker in own.values():
        if marker.handed_over_to:
            raise OwnerClaimError(*handed_over(config.commits_topic, config.query, marker.handed_over_to))
        if marker.output_topics and set(marker.output_topics) != set(config.output_topics):
            raise OwnerClaimError(
                config.commits_topic, f"query {config.query} committed output to {', '.join(marker.output_topics)}, "
                f"now it writes {', '.join(config.output_topics)}: its markers would leave those events out of the "
                "new topics",
                fix="keep this query's output topics; other topics are another query's (a candidate model: --shadow)",
            )  # fmt: skip


def check_markers(config: _Layout, markers: Mapping[int, CommitMarker]) -> None:
    """Fail unless every marker of the query was written with this layout and this input topic.

    Checked before the query starts and by every writer that reads its marker (a new producer),
    so a concurrent instance with another layout is caught where the markers are read anyway.
    """
    for marker in markers.values():
        if marker.source_topic_id and config.source_topic_id and marker.source_topic_id != config.source_topic_id:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query}, partition {marker.partition}: input topic {config.source_topic!r} was "
                f"deleted and recreated (the marker's topic id {marker.source_topic_id}, now {config.source_topic_id}):"
                " offsets committed on the old topic mean nothing on the new one",
                fix=f"to decide every record of the new topic once, start with --input-recreated "
                f"{config.source_topic_id} and a fresh --checkpoint ({OPERATOR_GUIDE}: topic recreation)",
            )
        if marker.partitions != config.partitions:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query} committed batch {marker.batch_id} with {marker.partitions} partitions, "
                f"now {config.partitions}",
                fix="keep the partition count its markers were written with "
                f"(to add partitions, follow {OPERATOR_GUIDE})",
            )
        if marker.source_topic != config.source_topic:
            raise CommitMarkerError(
                config.commits_topic,
                f"query {config.query} committed the output of input topic {marker.source_topic!r}, "
                f"now it reads {config.source_topic!r}: its offsets mean nothing there",
                fix=f"run it on {marker.source_topic!r} again; another input is another query with a checkpoint "
                "of its own (--query, --checkpoint), beside this one",
            )


def start_of(
    config: _Start, partition: int, marker: CommitMarker | None, origin: CommitMarker | None
) -> tuple[dict[int, int], Lineage]:
    """(query, partition)'s committed source offsets and lineage, from its ``marker`` and its ``origin``'s. Pure.

    A query without a marker starts where it was told: at ``start_offsets``, else after a handover
    (``after_query``) at the offsets the query it took over from committed (``origin``, its marker of
    the same partition): across a grown layout, where every old output partition committed
    (``OriginLayout.start``; ``uncommitted`` leaves out the rest the origin holds); otherwise from the beginning.
    """
    if marker is not None:
        check_markers(config, {partition: marker})
        if marker.handed_over_to:
            raise CommitMarkerError(*handed_over(config.commits_topic, config.query, marker.handed_over_to))
        return dict(marker.source_offsets), Lineage(marker.writer_version, marker.cuts, marker.started_after)
    if config.origin_layout is not None and not config.start_offsets:
        return config.origin_layout.start(), Lineage(started_after=config.after_query)
    if config.after_query and not config.start_offsets:
        if origin is None or origin.handed_over_to != config.query:
            raise CommitMarkerError(
                commits_topic_for(config.app, config.after_query),
                f"partition {partition}: query {config.after_query} did not hand over to {config.query}",
                fix="start the job with --after-query: its start hands over (the sink's prepare()) before any write",
            )  # fmt: skip
        if on_accepted_recreation(config, origin):  # the origin's offsets are of the old topic: start at 0 of this one
            return {}, Lineage(origin.writer_version, origin.cuts, config.after_query)
        check_markers(config, {partition: origin})
        return dict(origin.source_offsets), Lineage(origin.writer_version, origin.cuts, config.after_query)
    return dict(config.start_offsets), Lineage(started_after=config.after_query)


def on_accepted_recreation(config: _Start, marker: CommitMarker) -> bool:
    """``marker`` names another id of the input, and the operator accepted this one as recreated (--input-recreated)."""
    recreated = bool(config.source_topic_id) and config.input_recreated == config.source_topic_id
    return recreated and marker.source_topic_id not in ("", config.source_topic_id)

"""Commit markers as records: what one output partition of a query has committed, and where it is kept.

The exactly-once sink (``spark_jobs.sink.commit_markers``) writes and reads them in its transactions;
the operator page (``deploy.eos_view.health``) reads the newest of each partition to show it. Both share
these definitions, so they live in the contract: plain dataclasses, the names that map (app, query,
partition) to a topic and a ``transactional.id``, and the Avro encoding (schema ``commit_marker``).
Pure: no Kafka client here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ikkai.contract.codec import RecordCodec
from ikkai.errors import ConfigError, IkkaiError

COMMITS_TOPIC_PREFIX = "_ikkai.commits."
APP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # no dots: <app>.<query>.<p> then splits one way only
QUERY_NAME = re.compile(r"[A-Za-z0-9._-]{1,150}")  # the characters Kafka allows in a topic name


def check_names(app: str, query: str) -> None:
    """Refuse names that would make two queries share transactional ids or marker storage."""
    if not APP_NAME.fullmatch(app):
        raise ConfigError(
            "sink", "app", f"{app!r} is not 1-64 letters, digits, '_' or '-'",
            fix="choose an app name without dots: <app>.<query>.<partition> must split one way only",
        )  # fmt: skip
    if not QUERY_NAME.fullmatch(query) or query.startswith(".") or query.endswith("."):
        raise ConfigError(
            "sink", "query", f"{query!r} is not 1-150 letters, digits, '.', '_' or '-' (no leading or trailing dot)",
            fix="choose a query name Kafka accepts in a topic name (--query)",
        )  # fmt: skip


def commits_topic_for(app: str, query: str) -> str:
    check_names(app, query)
    return f"{COMMITS_TOPIC_PREFIX}{app}.{query}"


def app_and_query(topic: str) -> tuple[str, str] | None:
    """The (app, query) a commits topic's name stands for; None for any other topic."""
    if not topic.startswith(COMMITS_TOPIC_PREFIX):
        return None
    app, _, query = topic.removeprefix(COMMITS_TOPIC_PREFIX).partition(".")
    if APP_NAME.fullmatch(app) and QUERY_NAME.fullmatch(query):
        return app, query  # an app has no dots: the name splits one way only
    return None


class CommitMarkerError(IkkaiError):
    """The commit markers cannot be read, or disagree with the partition layout the job runs with."""

    def __init__(self, topic: str, problem: str, fix: str) -> None:
        super().__init__(f"{topic}: {problem}", fix=fix)
        self.topic = topic


@dataclass(frozen=True)
class CommitMarker:
    app: str
    query: str
    partition: int
    batch_id: int
    partitions: int
    records: int
    source_topic: str = ""
    # input partition -> the next input offset whose output (for this output partition) is not committed
    source_offsets: Mapping[int, int] = field(default_factory=dict)
    source_topic_id: str = ""  # Kafka's topic id of source_topic (KIP-516): a recreated topic has another
    output_topics: tuple[str, ...] = ()  # what the query writes: another query writing these is refused
    writer_version: str = ""  # what decides the output besides the input (the model version, enrich's settings)
    cuts: tuple[VersionCut, ...] = ()  # every change of writer_version on this output partition, oldest first
    started_after: str = ""  # the query whose committed offsets this one started from (a handover)
    handed_over_to: str = ""  # set by that handover on the query it started after: this one must not write again

    @property
    def key(self) -> bytes:
        return marker_key(self.app, self.query, self.partition)

    def encode(self, codec: RecordCodec) -> bytes:
        record = {**self.__dict__}
        record["source_offsets"] = [{"partition": p, "next_offset": o} for p, o in sorted(self.source_offsets.items())]
        record["output_topics"] = list(self.output_topics)
        record["cuts"] = [cut.to_record() for cut in self.cuts]
        return codec.encode("commit_marker", record)

    @classmethod
    def decode(cls, data: bytes, codec: RecordCodec) -> CommitMarker:
        record = codec.decode("commit_marker", data)  # an older marker gets v3's defaults
        record["source_offsets"] = {int(s["partition"]): int(s["next_offset"]) for s in record["source_offsets"]}
        record["output_topics"] = tuple(record.get("output_topics", ()))
        record["cuts"] = tuple(VersionCut.from_record(c) for c in record.get("cuts", ()))
        return cls(**record)

    @classmethod
    def decode_own(
        cls, data: bytes, codec: RecordCodec, topic: str, app: str, query: str, partition: int
    ) -> CommitMarker:
        """``decode``, refused unless the marker is (app, query, partition)'s: identity by the decoded fields, never by
        a key prefix. A marker of another query on its commits topic means two queries share marker storage."""
        marker = cls.decode(data, codec)
        if (marker.app, marker.query, marker.partition) != (app, query, partition):
            raise CommitMarkerError(
                topic,
                f"partition {partition} holds a marker of app {marker.app!r}, query {marker.query!r}, partition "
                f"{marker.partition}; this topic belongs to app {app!r}, query {query!r}",
                fix="give every query its own commits topic (the default, _ikkai.commits.<app>.<query>)",
            )
        return marker


@dataclass(frozen=True)
class VersionCut:
    """Where a new ``writer_version`` took over an output partition: per input partition, its first offset."""

    version: str
    batch_id: int
    from_offsets: Mapping[int, int] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        offsets = [{"partition": p, "offset": o} for p, o in sorted(self.from_offsets.items())]
        return {"version": self.version, "batch_id": self.batch_id, "from_offsets": offsets}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> VersionCut:
        offsets = {int(o["partition"]): int(o["offset"]) for o in record["from_offsets"]}
        return cls(str(record["version"]), int(record["batch_id"]), offsets)


_PARTS = b"\0"


def deciding_version(name: str, *deciding: bytes) -> str:
    """A ``writer_version``: ``name`` and 12 hex digits of the sha-256 of everything else that decides the output.

    The parts are joined by a NUL byte. Enrich's is ``enrich-lateness<ms>`` over its currency exponents and
    transform spec; infer's is the model artifact's version over the artifact's and the feature snapshots' bytes
    (``spark_jobs.model.fraud_model.deciding_version``). A change of any part is another version, so a cut.
    """
    return f"{name}-{hashlib.sha256(_PARTS.join(deciding)).hexdigest()[:12]}"


def recorded_versions(marker: CommitMarker | None, partition: int, current: str) -> tuple[tuple[int, str], ...]:
    """Which writer version decided each offset range of input ``partition``, as ``marker`` records it. Pure.

    ``((first offset, version), ...)`` ascending, the first from offset 0: the marker's cuts, then, from the
    offsets it has committed, ``current`` (what the running query decides the rest with). Each cut, being
    later, supersedes what an earlier one said from its offset on (a version that decided nothing, or cuts
    of the input before it was recreated). Offsets below the first cut (a query started at
    ``--start-offsets``) are given its version; a marker with no version at all (written before versions
    were recorded) names none, so ``current`` decides everything.
    """
    ranges: list[tuple[int, str]] = []
    changes: list[tuple[int, str]] = []
    if marker is not None:
        changes = [(cut.from_offsets.get(partition, 0), cut.version) for cut in marker.cuts]
        if changes or marker.writer_version:
            changes.append((marker.source_offsets.get(partition, 0), current))
    for offset, version in changes:
        ranges = [*(r for r in ranges if r[0] < offset), (offset, version)]
    if not ranges:
        return ((0, current),)
    ranges[0] = (0, ranges[0][1])
    merged: list[tuple[int, str]] = []
    for offset, version in ranges:
        if not merged or merged[-1][1] != version:
            merged.append((offset, version))
    return tuple(merged)


def marker_key(app: str, query: str, partition: int) -> bytes:
    """Also the producer's ``transactional.id``: one writer identity per (app, query, partition)."""
    check_names(app, query)
    return f"{app}.{query}.{partition}".encode()

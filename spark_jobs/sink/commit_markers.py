"""Commit markers: what each output partition of a query has committed, on the query's own topic.

Storage. Every (app, query) has its own compacted topic ``_ikkai.commits.<app>.<query>`` with one
partition per output partition. The marker of output partition p lives on partition p and only
the producer with ``transactional.id`` ``<app>.<query>.<p>`` ever writes there, in the same
transaction as the output it vouches for. So after that producer's ``init_transactions()`` (which
fences an older instance and completes or aborts its open transaction before it returns) no
transaction can be open on partition p: its last stable offset (LSO, where a read_committed
reader and librdkafka's EOF stop) equals its high watermark, and reading partition p to EOF sees
every committed marker of p. No other writer, dead or alive, can hide one or stall the read.

Why not one shared partition: under ``isolation.level=read_committed`` a reader's EOF and
``get_watermark_offsets`` stop at the LSO, so a marker committed *behind another writer's still
open transaction* is invisible. With a shared partition, partition 1's writer appending its marker
at offset X and committing slowly, partition 0's marker at Y > X committed, then a crash: partition
0's new writer reads up to X, misses its own marker, and writes its batch again.

The reader checks the promise: after reaching EOF it compares its position with the high watermark
(a read_uncommitted offset query); a gap means some other writer holds the partition open, which
breaks ownership, and the read waits for it (bounded) instead of deciding on a partial view.

Identity is by the decoded fields (app, query, partition), never by a key prefix; app and query
names are validated so that ``<app>.<query>.<p>`` and the topic name are unambiguous.

The records and names themselves (``CommitMarker``, ``VersionCut``, ``marker_key``, ``check_names``,
``commits_topic_for``) live in ``ikkai.contract.markers``, where the operator page reads them too;
this module keeps the Kafka side and re-exports them.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from ikkai.contract import kafka
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import (  # the records themselves live in the contract; importable from here too
    COMMITS_TOPIC_PREFIX,
    CommitMarker,
    CommitMarkerError,
    VersionCut,
    check_names,
    commits_topic_for,
    marker_key,
)
from ikkai.contract.partition_ends import records_to_end
from ikkai.errors import ConfigError

__all__ = [
    "COMMITS_TOPIC_CONFIG",
    "COMMITS_TOPIC_PREFIX",
    "CommitMarker",
    "CommitMarkerError",
    "VersionCut",
    "check_names",
    "commits_topic_for",
    "ensure_commits_topic",
    "marker_key",
    "read_marker",
    "read_markers",
]


@dataclass(frozen=True)
class Lineage:
    """What a committed marker says besides its offsets: the version that wrote it, every cut, the handover."""

    version: str = ""
    cuts: tuple[VersionCut, ...] = ()
    started_after: str = ""

    def written_by(self, version: str, batch_id: int, committed: Mapping[int, int]) -> Lineage:
        """The lineage once ``version`` has written: a new version is a cut at the offsets committed so far."""
        if version == self.version:
            return self
        cut = (VersionCut(version, batch_id, dict(committed)),) if version else ()
        return dataclasses.replace(self, version=version, cuts=(*self.cuts, *cut))


# segment.ms: the active segment is never compacted; roll it every 10 minutes so old markers go.
COMMITS_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "segment.ms": "600000"}


def ensure_commits_topic(cluster: KafkaContext, topic: str, partitions: int) -> None:
    """Create the query's commits topic (compacted, ``partitions`` partitions) unless it exists with that many; then,
    once it has its leaders, refuse it unless its cleanup policy is ``compact`` alone.

    With ``delete`` its markers go after the retention, and a query whose markers were deleted believes nothing
    was committed and writes everything again. A topic someone else created meanwhile is checked the same way.
    """
    admin = AdminClient(cluster.client_config())
    existing = admin.list_topics(timeout=30).topics.get(topic)
    if existing is not None and len(existing.partitions) != partitions:
        raise CommitMarkerError(
            topic,
            f"has {len(existing.partitions)} partitions but the job writes {partitions}",
            fix="keep the partition count its markers were written with (to add partitions, follow "
            "docs/exactly-once.md, 'What an operator may change, and how')",
        )
    if existing is None:
        try:  # returns once every broker shows it with its leaders
            kafka.ensure_topics(cluster, [topic], partitions, config=COMMITS_TOPIC_CONFIG)
        except ConfigError as exc:
            raise CommitMarkerError(
                topic, f"cannot create it: {exc}", fix=f"create it compacted with {partitions} partitions"
            ) from exc
    else:  # created a moment ago (by another start): it needs a moment before clients can use it
        try:
            kafka.wait_until_usable(cluster, [topic], time.monotonic() + 30)
        except ConfigError as exc:
            raise CommitMarkerError(topic, f"no leader after 30s: {exc}", fix="check the broker's health") from exc
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout=30)
    except KafkaException as exc:
        raise CommitMarkerError(
            topic, f"its configuration cannot be read ({exc.args[0].name()})",
            fix="grant DescribeConfigs on the commits topic to the job's principal",
        ) from exc  # fmt: skip
    policy = entries["cleanup.policy"].value if "cleanup.policy" in entries else "delete"
    if policy != "compact":
        raise CommitMarkerError(
            topic, f"cleanup.policy is {policy!r}: its markers would be deleted after the retention and the job "
            "would write everything they vouch for again",
            fix=f"kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
            "--add-config cleanup.policy=compact",
        )  # fmt: skip


def _has_leaders(client: Any, topic: str, partitions: int) -> bool:
    metadata = client.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return False
    return all(p in metadata.partitions and metadata.partitions[p].leader >= 0 for p in range(partitions))


# Per process: how far each commits partition was read, and the newest marker there. Reading
# resumes from that position, so a long-running job does not re-read the partition per batch.
# Safe under compaction: it only drops values a newer one replaced.
_seen: dict[tuple[str, str, int], tuple[int, CommitMarker | None]] = {}
_admins: dict[str, AdminClient] = {}


def forget_clusters() -> None:
    """Drop this process's read positions and admin clients: for a process that outlives the clusters it read (a
    test session's stacks come and go). A kept client of a stopped cluster retries its brokers and logs every
    failed connection for as long as the process lives."""
    _seen.clear()
    _admins.clear()


# A leader moved (a broker restarted, a partition failed over): the client's metadata is stale for a
# moment and refreshes itself. Asked again after a pause, the same question gets an answer.
_LEADER_MOVED = frozenset({
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
})  # fmt: skip


def _high_watermark(cluster: KafkaContext, topic: str, partition: int) -> int | None:
    """The partition's high watermark, open transactions included (a read_uncommitted offset query).

    None when a leader just moved (retriable: ask again); any other error stops the read.
    The admin client is dropped then: librdkafka's ListOffsets goes to the leader its metadata
    cache names and does not refresh that cache on NOT_LEADER or FENCED_LEADER_EPOCH, so a
    client kept across a broker's restart asks the wrong broker until ``metadata.max.age.ms``
    (15 minutes) passes. A new client reads fresh metadata.
    """
    admin = _admins.get(cluster.bootstrap_servers)
    if admin is None:
        admin = _admins[cluster.bootstrap_servers] = AdminClient(cluster.client_config())
    request = {TopicPartition(topic, partition): OffsetSpec.latest()}  # type: ignore[no-untyped-call]
    try:
        future = admin.list_offsets(request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=10)
        offset = int(next(iter(future.values())).result(timeout=15).offset)
    except KafkaException as exc:
        error = exc.args[0]
        if error.retriable() or error.code() in _LEADER_MOVED:
            _admins.pop(cluster.bootstrap_servers, None)
            return None
        raise CommitMarkerError(
            topic, f"partition {partition}: its high watermark cannot be read ({error.name()}: {error.str()})",
            fix="check the broker's health and this client's ACLs (Describe and Read on the commits topic)",
        ) from exc  # fmt: skip
    if offset < 0:  # no answer from a leader that is gone (OFFSET_INVALID): not a watermark, ask again
        _admins.pop(cluster.bootstrap_servers, None)
        return None
    return offset


def _consumer(cluster: KafkaContext) -> Consumer:
    settings = {
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",  # a cached position compacted away: read from the start again
        "enable.partition.eof": True,
        **kafka.QUICK_TO_END,  # per batch and partition: no long poll at the end, the leader connected at once
    }
    # The group is never joined (partitions are assigned); read_committed comes with consumer_config.
    return Consumer(cluster.consumer_config(f"_ikkai.commits.reader.{uuid.uuid4().hex}", **settings))


def read_marker(
    cluster: KafkaContext, app: str, query: str, partition: int, *, topic: str, deadline_s: float = 120.0
) -> CommitMarker | None:
    """The newest committed marker of (app, query, partition): call it after ``init_transactions``.

    Reads partition ``partition`` of ``topic`` to EOF (its LSO) and then checks that the LSO is
    the high watermark: if another writer holds the partition open, it waits until the broker
    aborts or completes that transaction (``transaction.timeout.ms``) or ``deadline_s`` passes.
    """
    codec = default_codec()
    position, latest = _seen.get((cluster.bootstrap_servers, topic, partition), (-2, None))  # -2: OFFSET_BEGINNING
    consumer = _consumer(cluster)
    give_up_at = time.monotonic() + deadline_s
    try:
        if not _has_leaders(consumer, topic, partition + 1):
            raise CommitMarkerError(topic, "the commits topic does not exist", fix="run the sink's prepare() first")
        assigned = TopicPartition(topic, partition, position)
        consumer.assign([assigned])
        at_end = False  # reached the LSO once: from then on, every quiet poll re-checks the high watermark
        while time.monotonic() < give_up_at:
            message: Any = consumer.poll(0.5)
            if message is not None and message.error() is None:
                latest = CommitMarker.decode_own(message.value(), codec, topic, app, query, partition)
                continue
            if message is not None and message.error().code() != KafkaError._PARTITION_EOF:
                raise CommitMarkerError(
                    topic, f"reading failed: {message.error().str()}", fix="check that the topic exists"
                )
            if message is None and not at_end:
                continue
            at_end = True
            here = message.offset() if message is not None else consumer.position([assigned])[0].offset
            if here >= 0:
                _seen[(cluster.bootstrap_servers, topic, partition)] = (here, latest)
            high = _high_watermark(cluster, topic, partition)
            if high is not None and here >= high:
                return latest
            time.sleep(0.2)  # a leader moved, or someone else's transaction is open here: ask again
        raise CommitMarkerError(
            topic,
            f"partition {partition}: a transaction stayed open for more than {deadline_s:.0f}s, but only "
            f"transactional.id {marker_key(app, query, partition).decode()} may write there",
            fix="another program writes into this query's commits topic; stop it (the broker aborts its "
            "transaction after its transaction.timeout.ms)",
        )
    finally:
        consumer.close()


def read_markers(cluster: KafkaContext, app: str, query: str, *, topic: str) -> dict[int, CommitMarker]:
    """Every partition's newest committed marker as read_committed sees it now, without waiting.

    For the driver's layout check before the query starts: a killed job's open transactions are
    fenced only when the restarted job's writers run, so this does not wait for them; what it
    finds is what they will find at least.
    """
    codec = default_codec()
    consumer = _consumer(cluster)
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return {}
        markers: dict[int, CommitMarker] = {}
        partitions = [(topic, p) for p in metadata.partitions]  # until each reports EOF (an empty one too)
        late = functools.partial(_partitions_not_read, topic, deadline_s=60)
        # Every error is named by the topic read (an error of no partition has no topic of its own).
        for message in records_to_end(consumer, partitions, 60, failed=lambda _, e: _read_failed(topic, e), late=late):
            marker = CommitMarker.decode_own(message.value(), codec, topic, app, query, message.partition())
            markers[marker.partition] = marker
        return markers
    finally:
        consumer.close()


def _read_failed(topic: str, error: KafkaError) -> CommitMarkerError:
    return CommitMarkerError(topic, f"reading failed: {error.str()}", fix="check the broker")


def _partitions_not_read(topic: str, pending: set[tuple[str, int]], deadline_s: float) -> CommitMarkerError:
    partitions = sorted(p for _, p in pending)
    return CommitMarkerError(topic, f"partitions {partitions} could not be read in {deadline_s:.0f}s",
                             fix="check the broker")  # fmt: skip

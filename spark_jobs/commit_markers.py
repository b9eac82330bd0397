"""The ``(app, query, partition) -> last committed batch`` markers on the compacted ``_ikkai.commits`` topic.

A marker is written inside the same Kafka transaction as the output it vouches for, so a
read_committed reader sees both or neither. Reading waits until no transaction is open on
the topic (the read_committed end offset reaches the high watermark): otherwise an older,
still-open transaction of another partition would hide a newer committed marker behind it.
The wait is bounded by ``transaction.timeout.ms`` of the writers (an abandoned transaction
is aborted by the broker after that long, or fenced sooner when its writer restarts).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ikkai.errors import IkkaiError
from spark_jobs.serialization import RecordCodec, default_codec

COMMITS_TOPIC = "_ikkai.commits"
COMMITS_PARTITION = 0  # one partition: a marker's place never depends on a partitioner


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

    @property
    def key(self) -> bytes:
        return marker_key(self.app, self.query, self.partition)

    def encode(self, codec: RecordCodec) -> bytes:
        return codec.encode("commit_marker", self.__dict__)

    @classmethod
    def decode(cls, data: bytes, codec: RecordCodec) -> CommitMarker:
        return cls(**codec.decode("commit_marker", data))


def marker_key(app: str, query: str, partition: int) -> bytes:
    """Also the producer's ``transactional.id``: one writer identity per (app, query, partition)."""
    return f"{app}.{query}.{partition}".encode()


def ensure_commits_topic(bootstrap: str, topic: str = COMMITS_TOPIC) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    # segment.ms: the active segment is never compacted; roll it every 10 minutes so old markers go.
    config = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "segment.ms": "600000"}
    try:
        admin.create_topics([NewTopic(topic, 1, -1, config=config)])[topic].result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise CommitMarkerError(topic, f"cannot create it: {exc}", fix="create it compacted, 1 partition") from exc
    give_up_at = time.monotonic() + 30
    while not _has_leader(admin, topic):  # a new topic needs a moment before clients can use it
        if time.monotonic() > give_up_at:
            raise CommitMarkerError(topic, "created, but no leader after 30s", fix="check the broker's health")
        time.sleep(0.1)


def _has_leader(client: Any, topic: str) -> bool:
    metadata = client.list_topics(topic, timeout=10).topics.get(topic)
    return bool(metadata is not None and metadata.error is None and metadata.partitions.get(COMMITS_PARTITION)
                and metadata.partitions[COMMITS_PARTITION].leader >= 0)  # fmt: skip


# Per process: how far _ikkai.commits was read, and the newest marker value of every key up to
# there. Reading resumes from that position, so a long-running job does not re-read the whole
# topic per batch and partition. Safe under compaction: it only drops values a newer one replaced.
_seen: dict[tuple[str, str], tuple[int, dict[bytes, bytes]]] = {}


def read_markers(
    bootstrap: str,
    app: str,
    query: str,
    *,
    topic: str = COMMITS_TOPIC,
    deadline_s: float = 120.0,
    wait_for_open_transactions: bool = True,
) -> dict[int, CommitMarker]:
    """The newest committed marker of every partition of (app, query), as read_committed sees it.

    A writer deciding whether to skip must wait for open transactions (the default). The
    driver's layout check must not: a killed job's open transaction is only fenced when the
    restarted job's tasks run, so waiting for it there would stall the restart.
    """
    codec = default_codec()
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"_ikkai.commits.reader.{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",  # a cached position compacted away: read from the start again
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        # The default 500 ms long poll made every read cost ~1 s (the fetch that reaches the end,
        # then the watermark query queued behind the next fetch), per batch and partition.
        "fetch.wait.max.ms": 10,
        # With sparse connections (the default) a new client connects to the partition leader only
        # on demand, after its bootstrap connection is gone: 50-500 ms of timers per read.
        "enable.sparse.connections": False,
    })  # fmt: skip
    prefix = f"{app}.{query}.".encode()
    position, latest = _seen.get((bootstrap, topic), (-2, {}))  # -2: OFFSET_BEGINNING
    latest = dict(latest)
    give_up_at = time.monotonic() + deadline_s
    try:
        if not _has_leader(consumer, topic):
            raise CommitMarkerError(topic, "the commits topic does not exist", fix="run the sink's prepare() first")
        consumer.assign([TopicPartition(topic, COMMITS_PARTITION, position)])
        while time.monotonic() < give_up_at:
            message: Any = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is None:
                latest[message.key() or b""] = message.value()
                continue
            if error.code() != KafkaError._PARTITION_EOF:
                raise CommitMarkerError(topic, f"reading failed: {error.str()}", fix="check that the topic exists")
            _seen[(bootstrap, topic)] = (message.offset(), latest)
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, COMMITS_PARTITION), timeout=10, cached=False)
            if not wait_for_open_transactions or message.offset() >= high:  # no open transaction left
                markers = [CommitMarker.decode(v, codec) for k, v in latest.items() if k.startswith(prefix)]
                return {marker.partition: marker for marker in markers}
        raise CommitMarkerError(
            topic,
            f"a transaction stayed open for more than {deadline_s:.0f}s",
            fix="another writer is stuck; it is aborted after its transaction.timeout.ms",
        )
    finally:
        consumer.close()

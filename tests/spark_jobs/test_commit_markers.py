"""The commit markers under the interleavings that broke them, built on purpose, on the real broker.

Each writer is driven directly (``write_partition``, what a Spark task calls), so the order of
events is exactly the one named; "a new worker" is a process that knows nothing: its producer
cache and marker positions are dropped first.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from demo.pipeline_io import by_partition, create_topic, unique
from ikkai.contract.codec import default_codec
from ikkai.errors import ConfigError
from spark_jobs import commit_markers, partition_transactions
from spark_jobs.commit_markers import (
    CommitMarker,
    CommitMarkerError,
    check_names,
    commits_topic_for,
    ensure_commits_topic,
    read_markers,
)
from spark_jobs.partition_transactions import Record, SinkConfig, uncommitted, write_partition
from tests.kafka_helpers import transactional_producer

PARTITIONS = 2


def config_for(bootstrap: str, out: str, query: str, **extra: object) -> SinkConfig:
    return SinkConfig(
        app="test", query=query, bootstrap_servers=bootstrap, output_topics=(out,), partitions=PARTITIONS,
        order_by=("seq",), source_topic="test.in", retry_deadline_s=20, **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def records(out: str, partition: int, offsets: range) -> list[Record]:
    return [(out, f"pay-{o}".encode(), f"value-{o}".encode(), None, None, partition, o) for o in offsets]


def new_worker() -> None:
    """Forget every producer and marker position of this process, as a restarted worker would."""
    for bootstrap, txn_id in list(partition_transactions._writers):
        config = SinkConfig(
            app="x", query="x", bootstrap_servers=bootstrap, output_topics=(), partitions=1, order_by=("x",),
            source_topic="x",
        )  # fmt: skip
        partition_transactions._discard(config, txn_id)
    commit_markers._seen.clear()


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    new_worker()
    yield
    new_worker()


@pytest.mark.integration
def test_a_marker_committed_behind_another_writers_open_transaction_is_seen(bootstrap: str) -> None:
    """The review's interleaving: p1's writer appended its marker and is still committing; p0 commits after it;
    the job is SIGKILLed. p0's new writer must see its own marker, or it writes the batch again."""
    out = create_topic(bootstrap, unique("test.out"), PARTITIONS)
    config = config_for(bootstrap, out, unique("q"))
    ensure_commits_topic(bootstrap, config.commits_topic, PARTITIONS)
    still_committing = transactional_producer(bootstrap, config.transactional_id(1))
    still_committing.begin_transaction()
    p1 = CommitMarker("test", config.query, 1, 7, PARTITIONS, 1, "test.in", {1: 10})
    still_committing.produce(config.commits_topic, key=p1.key, value=p1.encode(default_codec()), partition=1)
    still_committing.produce(out, key=b"pay-p1", value=b"open", partition=1)
    still_committing.flush(10)
    try:
        first = write_partition(config, 7, 0, records(out, 0, range(10)))
        assert (first.records, first.skipped) == (10, False)
        new_worker()  # SIGKILL: the restarted task knows nothing
        again = write_partition(config, 7, 0, records(out, 0, range(10)))
        assert (again.records, again.skipped, again.already_committed) == (0, True, 10)
        assert [value for _, value in by_partition(bootstrap, out)[0]] == [f"value-{o}".encode() for o in range(10)]
    finally:
        still_committing.abort_transaction(10)


@pytest.mark.integration
def test_another_querys_zombie_does_not_stall_or_hide_anything(bootstrap: str) -> None:
    out = create_topic(bootstrap, unique("test.out"), PARTITIONS)
    mine, theirs = config_for(bootstrap, out, unique("q")), config_for(bootstrap, out, unique("other"))
    for config in (mine, theirs):
        ensure_commits_topic(bootstrap, config.commits_topic, PARTITIONS)
    zombie = transactional_producer(bootstrap, theirs.transactional_id(0))  # dead, never comes back
    zombie.begin_transaction()
    zombie.produce(theirs.commits_topic, key=b"x", value=b"half-written", partition=0)
    zombie.flush(10)
    try:
        write_partition(mine, 0, 0, records(out, 0, range(5)))
        new_worker()
        assert write_partition(mine, 0, 0, records(out, 0, range(8))).records == 3  # only 5, 6, 7 were missing
    finally:
        zombie.abort_transaction(10)


@pytest.mark.integration
def test_query_names_that_share_a_prefix_never_read_each_others_markers(bootstrap: str) -> None:
    """``infer`` and ``infer.v2``: the old key-prefix match let ``infer`` take ``infer.v2``'s markers for its own."""
    out = create_topic(bootstrap, unique("test.out"), PARTITIONS)
    base = unique("infer")
    v2, v1 = config_for(bootstrap, out, f"{base}.v2"), config_for(bootstrap, out, base)
    ensure_commits_topic(bootstrap, v2.commits_topic, PARTITIONS)
    ensure_commits_topic(bootstrap, v1.commits_topic, PARTITIONS)
    write_partition(v2, 0, 0, records(out, 0, range(6)))
    new_worker()
    assert write_partition(v1, 0, 0, records(out, 0, range(6))).records == 6  # v1 committed nothing yet
    assert read_markers(bootstrap, "test", base, topic=v1.commits_topic)[0].query == base


@pytest.mark.integration
def test_a_commits_topic_shared_by_two_queries_is_refused(bootstrap: str) -> None:
    out = create_topic(bootstrap, unique("test.out"), PARTITIONS)
    shared = unique("_ikkai.commits.shared")
    first, second = (config_for(bootstrap, out, unique(q), commits_topic=shared) for q in ("a", "b"))
    ensure_commits_topic(bootstrap, shared, PARTITIONS)
    write_partition(first, 0, 0, records(out, 0, range(3)))
    new_worker()
    with pytest.raises(CommitMarkerError, match=f"holds a marker of app 'test', query '{first.query}'"):
        write_partition(second, 0, 0, records(out, 0, range(3)))


@pytest.mark.parametrize(
    ("app", "query"), [("a.b", "c"), ("", "q"), ("app", ""), ("app", ".q"), ("app", "q."), ("app", "q/1"), ("a b", "q")]
)
def test_names_that_would_make_identities_ambiguous_are_refused(app: str, query: str) -> None:
    with pytest.raises(ConfigError):
        check_names(app, query)


def test_the_old_collision_app_a_b_query_c_and_app_a_query_b_c_cannot_happen() -> None:
    with pytest.raises(ConfigError, match="without dots"):
        commits_topic_for("a.b", "c")
    assert commits_topic_for("a", "b.c") == "_ikkai.commits.a.b.c"  # the only reading of this name


def test_only_records_beyond_the_committed_source_offsets_are_written() -> None:
    batch = [*records("o", 0, range(5)), *records("o", 1, range(3))]
    pending, covered = uncommitted(batch, {0: 3, 2: 9})
    assert [(r[5], r[6]) for r in pending] == [(0, 3), (0, 4), (1, 0), (1, 1), (1, 2)]
    assert covered == {0: 5, 1: 3, 2: 9}  # partitions this transaction does not touch keep their offsets
    assert uncommitted(batch, {0: 5, 1: 3}) == ([], {0: 5, 1: 3})


def test_a_marker_round_trips_and_a_v1_marker_reads_with_no_offsets() -> None:
    codec = default_codec()
    marker = CommitMarker("app", "q", 1, 4, 2, 10, "events.payments", {0: 12, 1: 40})
    assert CommitMarker.decode(marker.encode(codec), codec) == marker
    old = codec.encode("commit_marker", {"app": "app", "query": "q", "partition": 1, "batch_id": 4,
                                         "partitions": 2, "records": 10}, version=1)  # fmt: skip
    assert CommitMarker.decode(old, codec).source_offsets == {}


class _Offsets:
    """An admin client whose offset query fails with ``codes`` in turn, then answers ``high``."""

    def __init__(self, codes: list[int], high: int) -> None:
        self.codes, self.high = codes, high

    def list_offsets(self, request: dict[object, object], **_: object) -> dict[object, object]:
        from concurrent.futures import Future

        from confluent_kafka import KafkaError, KafkaException

        future: Future[object] = Future()
        if self.codes:
            future.set_exception(KafkaException(KafkaError(self.codes.pop(0))))
        else:
            future.set_result(type("Answer", (), {"offset": self.high})())
        return dict.fromkeys(request, future)


def test_a_leader_that_moved_is_asked_again_and_other_errors_stop_the_read() -> None:
    """After a broker restart the offset query fails with FENCED_LEADER_EPOCH: the job died of it."""
    from confluent_kafka import KafkaError

    moved = _Offsets([KafkaError.FENCED_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION], 7)
    commit_markers._admins["fake:2"] = _Offsets([KafkaError.TOPIC_AUTHORIZATION_FAILED], 7)  # type: ignore[assignment]
    try:
        answers = []
        for _ in range(3):
            commit_markers._admins["fake:1"] = moved  # type: ignore[assignment]
            answers.append(commit_markers._high_watermark("fake:1", "t", 0))
        assert answers == [None, None, 7]
        with pytest.raises(CommitMarkerError, match="TOPIC_AUTHORIZATION_FAILED"):
            commit_markers._high_watermark("fake:2", "t", 0)
    finally:
        commit_markers._admins.pop("fake:1", None)
        commit_markers._admins.pop("fake:2", None)


@pytest.mark.parametrize("answer", ["leader moved", "no answer"])
def test_a_client_that_asked_a_moved_leader_is_replaced_not_asked_again(answer: str) -> None:
    """The soak on three brokers: librdkafka's ListOffsets keeps asking the leader its metadata cache names
    (NOT_LEADER, or OFFSET_INVALID from a leader that is gone) for up to 15 minutes; the marker read gave
    up after 120 s and stopped the enrich job. The client is dropped, so the next question uses fresh metadata."""
    from confluent_kafka import KafkaError

    stale = _Offsets([KafkaError.NOT_LEADER_FOR_PARTITION], 7) if answer == "leader moved" else _Offsets([], -1001)
    commit_markers._admins["fake:3"] = stale  # type: ignore[assignment]
    try:
        assert commit_markers._high_watermark("fake:3", "t", 0) is None
        assert "fake:3" not in commit_markers._admins  # the next call builds a new client
    finally:
        commit_markers._admins.pop("fake:3", None)

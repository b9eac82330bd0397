"""The commit markers under the interleavings that broke them, built on purpose, on the real broker.

Each writer is driven directly (``write_partition``, what a Spark task calls), so the order of
events is exactly the one named; "a new worker" is a process that knows nothing: its producer
cache and marker positions are dropped first.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.sink import commit_markers, partition_transactions
from spark_jobs.sink.commit_markers import (
    CommitMarker,
    CommitMarkerError,
    check_names,
    commits_topic_for,
    ensure_commits_topic,
    read_markers,
)
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.partition_transactions import uncommitted, write_partition
from spark_jobs.sink.producer_pool import process_pool
from spark_jobs.sink.record import Record
from stack.kit.topic_io import by_partition, create_topic, transactional_producer, unique

PARTITIONS = 2


def config_for(bootstrap: str, out: str, query: str, **extra: object) -> SinkConfig:
    return SinkConfig(
        app="test", query=query, cluster=KafkaContext.from_environment(bootstrap), output_topics=(out,),
        partitions=PARTITIONS,
        order_by=("seq",), source_topic="test.in", retry_deadline_s=20, **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def records(out: str, partition: int, offsets: range) -> list[Record]:
    return [(out, f"pay-{o}".encode(), f"value-{o}".encode(), None, None, partition, o) for o in offsets]


def new_worker() -> None:
    """Forget every producer and marker position of this process, as a restarted worker would."""
    process_pool().close_all()
    commit_markers._seen.clear()


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    new_worker()
    yield
    new_worker()


# The broker aborts a zombie's transaction only after this (the brokers' transaction.max.timeout.ms), far beyond
# the marker reader's 120 s deadline: a reader that had to wait for a zombie would give up first, not be rescued.
ZOMBIE_TIMEOUT_MS = 900_000


class _Killed(BaseException):
    """A kill -9 of the writing process, as a test can stop it: nothing after this point runs."""


def killed_before_commit(
    monkeypatch: pytest.MonkeyPatch, config: SinkConfig, partition: int, batch: list[Record]
) -> Producer:
    """``write_partition`` stopped as kill -9 stops it between its last produce and its commit.

    The real write path runs (its producer, ``begin_transaction``, the records and the marker
    where the code puts them), the records are sent, and then nothing: no commit, no abort, no
    close. The producer is returned alive and untouched, a zombie whose transaction stays open.
    """
    zombie: list[Producer] = []
    real_call = partition_transactions.call_with_retries  # type: ignore[attr-defined]

    def stop_at_commit(txn_id: str, operation: str, call: Callable[[], object], **kw: Any) -> object:
        if operation == "commit_transaction":
            kept = process_pool().kept((config.cluster.bootstrap_servers, txn_id))
            assert kept is not None
            producer = kept.producer
            assert producer.flush(10) == 0  # every record of the transaction is on the broker, uncommitted
            zombie.append(producer)
            raise _Killed
        return real_call(txn_id, operation, call, **kw)

    def forget(key: tuple[str, str]) -> None:  # no purge, no close: a killed process cleans nothing up
        process_pool().release(key)

    with monkeypatch.context() as patched:
        patched.setattr(partition_transactions, "call_with_retries", stop_at_commit)
        patched.setattr(process_pool(), "evict", forget)
        with pytest.raises(_Killed):
            write_partition(config, 0, partition, batch)
    return zombie[0]


def end(producer: Producer) -> None:
    with contextlib.suppress(KafkaException):  # already ended, or fenced by its successor
        producer.abort_transaction(10)


def values_of(cluster: KafkaContext, topic: str) -> dict[int, list[bytes | None]]:
    return {p: [value for _, value in records] for p, records in by_partition(cluster, topic).items()}


@pytest.mark.integration
def test_a_marker_committed_behind_another_writers_open_transaction_is_seen(
    cluster: KafkaContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partition 0's writer commits its marker *behind* a transaction another writer holds open on the same commits
    partition 0, then the job is SIGKILLed. A read_committed reader's EOF stops at that open transaction's first
    offset (the LSO), before the marker: only ``read_marker``'s wait for the high watermark lets the new writer see
    it. Without the wait it finds the older marker and writes offsets 5-9 a second time."""
    out = create_topic(cluster, unique("test.out"), PARTITIONS)
    config = config_for(cluster.bootstrap_servers, out, unique("q"))
    ensure_commits_topic(cluster, config.commits_topic, PARTITIONS)
    assert write_partition(config, 0, 0, records(out, 0, range(5))).records == 5  # marker {0: 5} committed
    stranger = transactional_producer(cluster, unique("test.stranger"))
    stranger.begin_transaction()
    stranger.produce(config.commits_topic, key=b"stranger", value=b"half-written", partition=0)
    assert stranger.flush(10) == 0
    open_ = [stranger]
    try:
        behind = write_partition(config, 1, 0, records(out, 0, range(5, 10)))  # the kept producer: no marker read
        assert (behind.records, behind.new_producer) == (5, False)  # marker {0: 10} committed behind the stranger
        new_worker()  # SIGKILL: the restarted task knows nothing
        gaps: list[tuple[int, int, dict[int, int]]] = []
        real_high_watermark = commit_markers._high_watermark

        def high_watermark(cluster: KafkaContext, topic: str, partition: int) -> int | None:
            high = real_high_watermark(cluster, topic, partition)
            here, seen = commit_markers._seen[(cluster.bootstrap_servers, topic, partition)]
            if high is not None and here < high and open_:
                gaps.append((here, high, dict(seen.source_offsets) if seen else {}))
                end(open_.pop())  # the stranger's transaction ends only while the reader waits at the LSO
            return high

        monkeypatch.setattr(commit_markers, "_high_watermark", high_watermark)
        again = write_partition(config, 1, 0, records(out, 0, range(10)))
        assert (again.records, again.skipped, again.already_committed) == (0, True, 10)
        assert gaps and gaps[0][2] == {0: 5}, "the reader never stood at the LSO before its newest marker"
        assert values_of(cluster, out)[0] == [f"value-{o}".encode() for o in range(10)]
    finally:
        for producer in open_:
            end(producer)


@pytest.mark.integration
def test_another_querys_zombie_does_not_stall_or_hide_anything(
    cluster: KafkaContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two zombies, each left by a kill -9 between its produce and its commit, built by the real write path (so
    their markers sit wherever the code puts markers): one of another query whose name shares this one's prefix
    (``<q>.v2``), and one of this query's own partition 1. Partition 0's new writer must neither wait for them nor
    miss its own marker. With all of a query's markers on one commits partition, partition 1's zombie holds that
    partition open and partition 0's writer stalls until its deadline; with markers of every query on one
    partition, so does ``<q>.v2``'s; with identity by key prefix, ``<q>`` takes ``<q>.v2``'s marker for its own."""
    out = create_topic(cluster, unique("test.out"), PARTITIONS)
    mine = config_for(cluster.bootstrap_servers, out, unique("q"), transaction_timeout_ms=ZOMBIE_TIMEOUT_MS)
    theirs_out = create_topic(cluster, unique("test.out"), PARTITIONS)
    theirs = config_for(
        cluster.bootstrap_servers, theirs_out, f"{mine.query}.v2", transaction_timeout_ms=ZOMBIE_TIMEOUT_MS
    )
    for config in (mine, theirs):
        ensure_commits_topic(cluster, config.commits_topic, PARTITIONS)
    assert write_partition(mine, 0, 0, records(out, 0, range(5))).records == 5
    write_partition(theirs, 0, 0, records(theirs_out, 0, range(20)))  # committed: <q>.v2 is further on partition 0
    new_worker()
    zombies = [
        killed_before_commit(monkeypatch, theirs, 0, records(theirs_out, 0, range(20, 40))),
        killed_before_commit(monkeypatch, mine, 1, records(out, 1, range(4))),
    ]
    try:
        new_worker()
        again = write_partition(mine, 1, 0, records(out, 0, range(8)))
        assert (again.records, again.already_committed) == (3, 5)  # only 5, 6, 7 were missing
        assert values_of(cluster, out) == {0: [f"value-{o}".encode() for o in range(8)], 1: []}
        assert values_of(cluster, theirs_out) == {0: [f"value-{o}".encode() for o in range(20)], 1: []}
    finally:
        for zombie in zombies:
            end(zombie)


@pytest.mark.integration
def test_query_names_that_share_a_prefix_never_read_each_others_markers(cluster: KafkaContext) -> None:
    """``infer`` and ``infer.v2`` made to share one commits topic (a hand-set ``commits_topic``, as the old shared
    topic was): a marker counts by its decoded (app, query, partition), and the marker of output partition p lives
    on commits partition p. By key prefix, ``infer``'s writer of partition 1 took ``infer.v2``'s marker for its own
    and skipped its records; with one marker partition, ``infer``'s writer of partition 0 met that marker."""
    out = create_topic(cluster, unique("test.out"), PARTITIONS)
    shared = unique("_ikkai.commits.shared")
    base = unique("infer")
    v2, v1 = (config_for(cluster.bootstrap_servers, out, query, commits_topic=shared) for query in (f"{base}.v2", base))
    ensure_commits_topic(cluster, shared, PARTITIONS)
    assert write_partition(v2, 0, 1, records(out, 1, range(6))).records == 6  # infer.v2's marker of partition 1
    new_worker()
    assert write_partition(v1, 0, 0, records(out, 0, range(6))).records == 6  # partition 0: nobody else's marker
    new_worker()
    theirs = re.escape(f"query '{base}.v2', partition 1")
    with pytest.raises(CommitMarkerError, match=theirs):  # partition 1 holds infer.v2's: refused, never adopted
        write_partition(v1, 0, 1, records(out, 1, range(6)))
    with pytest.raises(CommitMarkerError, match=theirs):  # and the driver's check before a query starts says so
        read_markers(cluster, "test", base, topic=shared)
    assert values_of(cluster, out) == {p: [f"value-{o}".encode() for o in range(6)] for p in (0, 1)}


@pytest.mark.integration
def test_a_commits_topic_shared_by_two_queries_is_refused(cluster: KafkaContext) -> None:
    out = create_topic(cluster, unique("test.out"), PARTITIONS)
    shared = unique("_ikkai.commits.shared")
    first, second = (config_for(cluster.bootstrap_servers, out, unique(q), commits_topic=shared) for q in ("a", "b"))
    ensure_commits_topic(cluster, shared, PARTITIONS)
    write_partition(first, 0, 0, records(out, 0, range(3)))
    new_worker()
    with pytest.raises(CommitMarkerError, match=f"holds a marker of app 'test', query '{first.query}'"):
        write_partition(second, 0, 0, records(out, 0, range(3)))


@pytest.mark.integration
@pytest.mark.parametrize("policy", ["delete", "compact,delete"])
def test_a_commits_topic_that_deletes_is_refused_at_start_with_the_fix(cluster: KafkaContext, policy: str) -> None:
    """issue 27, item 6: a commits topic with cleanup.policy=delete loses its markers after the retention, and the
    query then writes everything again. ``ensure_commits_topic`` (the sink's prepare) refuses it in one line."""
    topic = create_topic(cluster, unique("_ikkai.commits.test"), PARTITIONS, config={"cleanup.policy": policy})
    with pytest.raises(CommitMarkerError, match=re.escape(f"cleanup.policy is {policy!r}")) as refused:
        ensure_commits_topic(cluster, topic, PARTITIONS)
    assert f"--entity-name {topic} --add-config cleanup.policy=compact" in str(refused.value)
    ensure_commits_topic(cluster, create_topic(cluster, unique("_ikkai.commits.test"), PARTITIONS,
                                                 config={"cleanup.policy": "compact"}), PARTITIONS)  # fmt: skip


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
            answers.append(commit_markers._high_watermark(KafkaContext("fake:1"), "t", 0))
        assert answers == [None, None, 7]
        with pytest.raises(CommitMarkerError, match="TOPIC_AUTHORIZATION_FAILED"):
            commit_markers._high_watermark(KafkaContext("fake:2"), "t", 0)
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
        assert commit_markers._high_watermark(KafkaContext("fake:3"), "t", 0) is None
        assert "fake:3" not in commit_markers._admins  # the next call builds a new client
    finally:
        commit_markers._admins.pop("fake:3", None)

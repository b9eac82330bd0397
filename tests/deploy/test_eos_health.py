"""The exactly-once health reader (deploy/eos_view/health.py): its pure core (open and stuck transactions, the newest
marker, the rows the page shows) and, on the real broker, markers written in transactions the way the sink writes
them and a transaction left open on a commits partition. The page's route over it is test_page_health.py."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from deploy.eos_view.health import (
    SAMPLE_SECONDS,
    STUCK_SECONDS,
    Ends,
    Health,
    HealthReader,
    MarkerRead,
    Markers,
    OpenTransaction,
    Where,
    health_of,
    newest,
    open_transactions,
)
from deploy.serve.page.views import health_tables
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker, commits_topic_for
from spark_jobs.sink.commit_markers import ensure_commits_topic
from stack.kit.topic_io import transactional_producer

TOPIC = "_ikkai.commits.app.q"
P0, P1 = (TOPIC, 0), (TOPIC, 1)


def marker(batch: int, partition: int = 0, app: str = "app", query: str = "q") -> CommitMarker:
    return CommitMarker(
        app=app, query=query, partition=partition, batch_id=batch, partitions=2, records=10 * batch,
        source_topic="events.payments", source_offsets={0: 100 * batch, 1: 50 * batch}, writer_version="m-1",
    )  # fmt: skip


def test_a_transaction_open_with_the_same_end_over_two_samples_and_long_enough_is_stuck() -> None:
    open_, closed = Ends(0, 10, 12), Ends(0, 12, 12)
    first = open_transactions({}, {P0: open_, P1: closed}, now=100.0)
    assert first == {P0: OpenTransaction(10, 100.0, 1)}  # LSO below HW: open; LSO at HW: nothing open
    assert not first[P0].stuck(100.0 + 10 * STUCK_SECONDS)  # one sample is never enough
    second = open_transactions(first, {P0: open_, P1: closed}, now=100.0 + STUCK_SECONDS - 1)
    assert second[P0] == OpenTransaction(10, 100.0, 2) and not second[P0].stuck(100.0 + STUCK_SECONDS - 1)
    third = open_transactions(second, {P0: open_}, now=100.0 + STUCK_SECONDS)
    assert third[P0].stuck(100.0 + STUCK_SECONDS)
    # The end moved: what was open completed; the transaction open now is a new one and counts anew.
    moved = open_transactions(third, {P0: Ends(0, 11, 14)}, now=200.0)
    assert moved == {P0: OpenTransaction(11, 200.0, 1)}
    assert open_transactions(moved, {P0: Ends(0, 14, 14)}, now=205.0) == {}


def test_the_newest_record_per_partition_is_the_one_with_the_highest_offset() -> None:
    reads = [(P0, MarkerRead(5, b"b", 2)), (P0, MarkerRead(7, b"c", 3)), (P0, MarkerRead(3, b"a", 1)),
             (P1, MarkerRead(1, b"x", 1))]  # fmt: skip
    assert newest(reads) == {P0: MarkerRead(7, b"c", 3), P1: MarkerRead(1, b"x", 1)}


def test_health_decodes_each_marker_and_says_where_none_could_be_read() -> None:
    codec = default_codec()
    other = ("_ikkai.commits.app.r", 0)
    ends = {P0: Ends(0, 20, 22), P1: Ends(0, 0, 0), other: Ends(0, 40, 40)}
    reads = {P0: MarkerRead(18, marker(3).encode(codec), 90_000), other: MarkerRead(38, b"not avro", 99_000)}
    names = {TOPIC: ("app", "q"), "_ikkai.commits.app.r": ("app", "r")}
    transactions = {P0: OpenTransaction(20, 30.0, 2)}
    health = health_of(100.0, names, ends, reads, transactions, unread={other}, stuck_seconds=60)
    assert list(health.queries) == [("app", "q"), ("app", "r")]
    p0, p1 = health.queries[("app", "q")]
    assert (p0.marker, p0.age_seconds(100.0), p0.stuck) == (marker(3), 10.0, True)
    assert (p1.marker, p1.problem, p1.open_transaction) == (None, "no marker yet", None)
    (r,) = health.queries[("app", "r")]
    assert r.marker is None and r.problem is not None and r.problem.startswith("not read to its end")
    assert health_of(100.0, names, ends, reads, {}).queries[("app", "r")][0].problem.startswith("offset 38 is no")
    tables = health_tables(health)
    assert [(t["app"], t["query"], t["topic"]) for t in tables] == [("app", "q", TOPIC), ("app", "r", other[0])]
    row = tables[0]["rows"][0]
    assert (row["batch"], row["source_offsets"], row["age"], row["transaction"], row["open_for"]) == (
        3, "0:300 1:150", 10, "stuck", 70
    )  # fmt: skip


class CountingReader(HealthReader):
    reads = 0

    def _read(self) -> tuple[dict[str, tuple[str, str]], dict[Where, Ends], Markers, int]:
        self.reads += 1
        return {TOPIC: ("app", "q")}, {P0: Ends(0, 10, 12)}, ({}, set()), 0

    def _around(self, health: Health) -> Health:
        return health  # lags, dead letters and the reconciliation have their own tests


def test_the_reader_samples_at_most_once_per_interval_however_many_look() -> None:
    now = [1000.0]
    reader = CountingReader(KafkaContext("127.0.0.1:9"), clock=lambda: now[0])
    for _ in range(5):
        reader.sampled()
    assert reader.reads == 1
    now[0] += SAMPLE_SECONDS
    assert reader.sampled().partitions[0].open_transaction == OpenTransaction(10, 1000.0, 2)
    assert reader.reads == 2


# On the real broker.


def new_query(bootstrap: str) -> tuple[str, str, str]:
    """A fresh (app, query) with its commits topic of two partitions, created as the sink creates it.

    The reader reads only the first ``MAX_PARTITIONS`` commits partitions in name order, so the name puts this
    topic first: '-' is the lowest character a topic name may hold (other tests' apps begin with a letter), and
    the digits after it count down with the clock, so a newer topic sorts before every older one that earlier
    runs left on a long-lived cluster. Only topics of tests running at the same moment can come before it.
    """
    app, name = f"-eos{10**13 - time.time_ns() // 1_000_000:013d}{uuid.uuid4().hex[:6]}", "infer"
    topic = commits_topic_for(app, name)
    ensure_commits_topic(KafkaContext.from_environment(bootstrap), topic, 2)
    return app, name, topic


@pytest.fixture
def query(bootstrap: str) -> tuple[str, str, str]:
    return new_query(bootstrap)


def write_markers(cluster: KafkaContext, topic: str, markers: list[CommitMarker]) -> None:
    """Each marker in its own committed transaction, by its partition's writer (transactional.id = its key)."""
    codec = default_codec()
    producers: dict[bytes, Producer] = {}
    for m in markers:
        if m.key not in producers:  # one per writer identity: a second would fence the first
            producers[m.key] = transactional_producer(cluster, m.key.decode())
        producer = producers[m.key]
        producer.begin_transaction()
        producer.produce(topic, key=m.key, value=m.encode(codec), partition=m.partition)
        producer.commit_transaction(60)


def reader_of(bootstrap: str, now: list[float]) -> HealthReader:
    return HealthReader(KafkaContext.from_environment(bootstrap), clock=lambda: now[0])


@pytest.mark.integration
def test_the_last_committed_marker_of_each_partition_is_shown(
    cluster: KafkaContext, query: tuple[str, str, str]
) -> None:
    app, name, topic = query
    write_markers(cluster, topic, [marker(b, 0, app, name) for b in range(3)] + [marker(0, 1, app, name)])
    health = reader_of(cluster.bootstrap_servers, [time.time()]).sampled()
    p0, p1 = health.queries[(app, name)]
    assert (p0.partition, p0.marker, p1.partition, p1.marker) == (
        0,
        marker(2, 0, app, name),
        1,
        marker(0, 1, app, name),
    )
    assert p0.marker_ms is not None and p0.age_seconds(health.at) is not None
    assert p0.open_transaction is None and p1.open_transaction is None
    assert p0.ends.committed == p0.ends.high == 6  # three markers, each followed by its commit control record


@pytest.mark.integration
def test_a_transaction_left_open_on_a_commits_partition_shows_open_then_stuck(
    cluster: KafkaContext, query: tuple[str, str, str]
) -> None:
    app, name, topic = query
    write_markers(cluster, topic, [marker(0, 0, app, name), marker(0, 1, app, name)])
    stranger = transactional_producer(cluster, f"{app}.stranger")
    stranger.begin_transaction()
    stranger.produce(topic, key=b"x", value=marker(1, 1, app, name).encode(default_codec()), partition=1)
    stranger.flush(30)  # produced, not committed: partition 1's read_committed end stays behind its high watermark
    try:
        now = [time.time()]
        reader = reader_of(cluster.bootstrap_servers, now)
        p0, p1 = reader.sampled().queries[(app, name)]
        assert p0.open_transaction is None
        assert p1.open_transaction is not None and not p1.stuck
        assert p1.marker == marker(0, 1, app, name)  # the open transaction's record is not read
        now[0] += STUCK_SECONDS
        p0, p1 = reader.sampled().queries[(app, name)]
        assert p1.stuck and p1.open_transaction is not None and p1.open_transaction.samples == 2
    finally:
        stranger.abort_transaction(60)
    # The coordinator writes the abort marker after abort_transaction returns: sample until it is there (bounded).
    give_up_at = time.monotonic() + 60
    while True:
        now[0] += SAMPLE_SECONDS
        health: Health = reader.sampled()
        if all(p.open_transaction is None for p in health.queries[(app, name)]) or time.monotonic() > give_up_at:
            break
        time.sleep(0.2)
    assert [p.open_transaction for p in health.queries[(app, name)]] == [None, None]
    assert health.queries[(app, name)][1].ends.committed == health.queries[(app, name)][1].ends.high == 4

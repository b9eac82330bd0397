"""Adding partitions (issue 27, item 3): refused in one line with the query that continues exactly, never a hang.

The procedure (docs/exactly-once.md, "What an operator may change, and how": partitions): stop what
writes the input, let the job drain and stop, grow every topic of its layout to one count, and start
it as a new query that takes over from the old one (``--query``, ``--after-query``, a fresh
``--checkpoint``), as its refusal prints: no offsets to type, the new query leaves out what the old
one committed. The unit tests build the stale or grown answers with fakes; the integration tests run
the enrich job on the real stack and count what read_committed readers see.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from demo.payments_simulation import DAY_MS, START_MS, generate_profiles
from demo.raw_payments import MixedStream, RawLine, mixed_stream, produce_lines
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich.master_data import publish_profiles
from spark_jobs.sink import transactional_sink
from spark_jobs.sink.commit_markers import CommitMarker, CommitMarkerError, commits_topic_for, read_marker
from spark_jobs.sink.commit_pause import PAUSE_BEFORE_COMMIT
from spark_jobs.sink.grown_layout import OriginLayout, origin_layout, refuse_a_grown_layout
from spark_jobs.sink.partition_transactions import uncommitted
from spark_jobs.sink.record import Record
from spark_jobs.sink.transactional_sink import SinkConfig, check_topics
from stack.kit.topic_io import by_partition, create_topic, flat, grow_topics, unique
from tests.spark_jobs.enrich_process import EnrichProcess, EnrichTopics

pytestmark = pytest.mark.heavy


def config(partitions: int = 3) -> SinkConfig:
    return SinkConfig(
        app="ikkai", query="enrich", cluster=KafkaContext('b:9092'), output_topics=("events.x", "dlq.x"),
        partitions=partitions, order_by=("input_partition", "input_offset"), source_topic="ingest.x",
    )  # fmt: skip


def marker(partition: int, offsets: dict[int, int], partitions: int = 2) -> CommitMarker:
    return CommitMarker("ikkai", "enrich", partition, 9, partitions, 5, "ingest.x", offsets)


def test_a_grown_layout_is_refused_with_the_command_of_the_new_query_and_no_offsets() -> None:
    """Markers pinned at 2, topics grown to 3: the fix names the new query and the handover from this one, a plain
    command line with no offsets to type (issue 43, case 6: the printed offsets could skip records or repeat them)."""
    markers = {0: marker(0, {0: 120, 1: 7}), 1: marker(1, {1: 80})}
    with pytest.raises(CommitMarkerError) as refused:
        refuse_a_grown_layout(config(3), markers)
    text = str(refused.value)
    assert "query enrich committed with 2 partitions, the topics now have 3" in text
    assert "run the job as a new query that continues this one: --query enrich-p3 --after-query enrich and a fresh " \
        "--checkpoint;" in text  # fmt: skip
    assert "--start-offsets" not in text and "\n" not in text
    refuse_a_grown_layout(config(2), markers)  # the same layout: nothing to say


def test_a_query_without_markers_is_refused_by_its_commits_topics_count_with_the_same_command() -> None:
    """A query that committed nothing yet (it ran over an empty input) has its layout only in its commits topic: topics
    grown past that count are refused as a grown layout, naming the query that continues (found by the explorer's
    soak: the commits topic's own count check named no command)."""
    with pytest.raises(CommitMarkerError) as refused:
        refuse_a_grown_layout(config(4), {}, commits_partitions=2)
    text = str(refused.value)
    assert "query enrich committed nothing yet and its commits topic has 2 partitions, the topics now have 4" in text
    assert "--query enrich-p4 --after-query enrich and a fresh --checkpoint;" in text
    refuse_a_grown_layout(config(4), {}, commits_partitions=4)  # the same layout
    refuse_a_grown_layout(config(4), {}, commits_partitions=None)  # no commits topic yet: a first start
    refuse_a_grown_layout(config(2), {}, commits_partitions=4)  # more than the job writes: not growth (counts grow)
    refuse_a_grown_layout(config(3), {0: marker(0, {0: 1}, partitions=3)}, commits_partitions=2)  # markers decide


def record(partition: int, offset: int, key: bytes) -> Record:
    return ("events.x", key, b"v", None, None, partition, offset)


def key_of(partition: int, partitions: int) -> bytes:
    """A key whose default partition among ``partitions`` is ``partition``."""
    return next(k for n in range(10_000) if kafka_partition(k := f"k{n}".encode(), partitions) == partition)


def test_a_routed_origin_holds_exactly_what_its_old_partitions_committed() -> None:
    """Issue 43, case 6: a routed batch committed on old output partition 0 (input 0 up to 200) but not on 1 (up to
    150). A record is left out when its old route (its key's partition among the OLD count) committed it: input 0
    offsets 150-199 are left out on route 0, written on route 1; nothing at or above 200 is left out. The start is
    the lowest (150, and 0 where an old partition has none), so nothing is skipped; ``holds`` does the rest."""
    origin = OriginLayout(2, {0: {0: 200, 1: 40}, 1: {0: 150}}, by_input_partition=False)
    old_0, old_1 = key_of(0, 2), key_of(1, 2)
    assert origin.holds(record(0, 170, old_0)) and not origin.holds(record(0, 170, old_1))
    assert origin.holds(record(0, 149, old_1)) and not origin.holds(record(0, 150, old_1))
    assert not origin.holds(record(0, 200, old_0)) and not origin.holds(record(0, 10_000, old_1))
    assert origin.holds(record(1, 39, old_0)) and not origin.holds(record(1, 39, old_1))  # route 1 has none of input 1
    assert not origin.holds(record(2, 0, old_0))  # a new input partition: nothing committed
    assert origin.start() == {0: 150, 1: 0}
    batch = [record(0, o, k) for o in (149, 150, 199, 200) for k in (old_0, old_1)]
    pending, covered = uncommitted(batch, origin.start(), origin)
    assert [(r[6], r[1]) for r in pending] == [(150, old_1), (199, old_1), (200, old_0), (200, old_1)]
    assert covered == {0: 201, 1: 0}  # the origin's records are in the output too: the marker goes past them


def test_the_old_route_is_the_old_count_not_the_new_one() -> None:
    """The mutation this pins: routing by the new count (3) picks another old marker for some keys."""
    origin = OriginLayout(2, {0: {0: 200}, 1: {0: 150}}, by_input_partition=False)
    moved = next(
        k for n in range(10_000) if kafka_partition(k := f"k{n}".encode(), 2) == 0 and kafka_partition(k, 3) == 1
    )
    assert origin.old_partition(record(0, 170, moved)) == 0 and origin.holds(record(0, 170, moved))


def test_an_origin_written_by_input_partition_starts_at_each_partitions_own_marker() -> None:
    """In place (infer), or keyed to the input's partition (enrich): old output partition p held input partition p's
    records only, so p's marker is exact for p whatever the key; a batch committed on partition 0 only skips
    nothing of partition 1 (its older marker)."""
    origin = OriginLayout(2, {0: {0: 200}, 1: {1: 40}}, by_input_partition=True)
    assert origin.start() == {0: 200, 1: 40}
    assert origin.holds(record(0, 199, key_of(1, 2))) and not origin.holds(record(1, 40, key_of(1, 2)))
    assert origin_layout({0: marker(0, {0: 200}), 1: marker(1, {1: 40})}, 3, by_input_partition=True) == origin
    assert origin_layout({0: marker(0, {0: 200}, partitions=3)}, 3, by_input_partition=True) is None  # same layout


class _Metadata:
    """list_topics answers in turn: the topics a lagging broker shows, then all of them."""

    def __init__(self, *answers: dict[str, int]) -> None:
        self.answers = list(answers)
        self.asked = 0

    def list_topics(self, *_: object, **__: object) -> SimpleNamespace:
        self.asked += 1
        counts = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        topics = {n: SimpleNamespace(error=None, partitions=dict.fromkeys(range(c))) for n, c in counts.items()}
        return SimpleNamespace(topics=topics)


ALL = {"events.x": 3, "dlq.x": 3, "_ikkai.commits.ikkai.enrich": 3, "ingest.x": 3}


def test_a_topic_a_lagging_broker_does_not_show_yet_is_asked_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 27, item 7: enrich stopped at start with "_ikkai.commits.ikkai.enrich: the output topic does not exist"
    right after creating it: the broker the check asked had not learned of it yet."""
    monkeypatch.setattr(transactional_sink.time, "sleep", lambda _s: None)
    lagging = {n: c for n, c in ALL.items() if not n.startswith("_ikkai")}
    metadata = _Metadata(lagging, lagging, ALL)
    check_topics(config(3), metadata)  # type: ignore[arg-type]
    assert metadata.asked == 3


def test_a_topic_that_stays_missing_is_refused_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional_sink.time, "sleep", lambda _s: None)
    metadata = _Metadata({n: c for n, c in ALL.items() if n != "dlq.x"})
    with pytest.raises(CommitMarkerError, match=r"dlq\.x: the output topic does not exist"):
        check_topics(config(3), metadata, deadline_s=0.05)  # type: ignore[arg-type]


def test_an_input_that_grew_under_a_running_job_stops_it_with_the_procedure() -> None:
    """Checked on the driver before each batch is written: the batch with the new partition writes nothing."""
    with pytest.raises(CommitMarkerError, match=r"ingest\.x: the input has 4 partitions, query enrich's layout 3"):
        check_topics(config(3), _Metadata({**ALL, "ingest.x": 4}))  # type: ignore[arg-type]


# -- on the real stack --------------------------------------------------------------------------------------------


def enrich_topics(cluster: KafkaContext, stream: MixedStream, partitions: int) -> EnrichTopics:
    """Master data first, then the input, events and DLQ topics of ``partitions`` partitions."""
    name = unique("grow")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"masterdata.merchants.{name}",
                          f"masterdata.customers.{name}")  # fmt: skip
    merchants, customers = generate_profiles(stream.world, stream.seed)
    publish_profiles(cluster, merchants, customers, merchants_topic=topics.merchants,
                     customers_topic=topics.customers, transactional_id=unique("test.masterdata"))  # fmt: skip
    for topic in (topics.input, topics.events, topics.dlq):
        create_topic(cluster, topic, partitions)
    return topics


def error_lines(job: EnrichProcess) -> list[str]:
    return [line for line in job.log if line.startswith("ikkai: error: ")]


@pytest.mark.integration
@pytest.mark.timeout(2400)  # three enrich runs in a row: slow on a loaded 2-core machine
def test_partitions_added_between_runs_go_on_as_a_new_query_with_nothing_lost_or_twice(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """The procedure, end to end: enrich drains ingest on 2 partitions; every topic of its layout grows to 3; the
    same query is refused at start in one line naming the new query and its handover, no offsets; that new query
    then decides the lines written with 3 partitions. A read_committed reader sees every line of both streams once, as
    an event or a dead letter, and no event twice. (Before: records of the new partition were dead-lettered as
    wrong_partition and the dead-letter key search never ended.)"""
    before = mixed_stream(7, payments=120, partitions=2)
    # An hour later: the new query rebuilds each old partition's event-time state (watermark, dedupe) from the
    # lines before the cut, so lines written after the growth must be later than those, as they are in life.
    after = mixed_stream(11, payments=120, partitions=3, start_ms=START_MS + DAY_MS + 3_600_000)
    topics = enrich_topics(cluster, before, 2)
    produce_lines(cluster, topics.input, before.lines)
    query = unique("enrich")
    first = EnrichProcess(cluster, topics, tmp_path / "first", query)
    assert first.wait(1200) == 0, first.tail()

    grow_topics(cluster, (topics.input, topics.events, topics.dlq), 3)
    refused = EnrichProcess(cluster, topics, tmp_path / "first", query)
    assert refused.wait(1200) == 1, refused.tail()
    [line] = error_lines(refused)  # one line: what, where, what to do
    assert f"query {query} committed with 2 partitions, the topics now have 3" in line
    command = printed_command(line)  # no offsets to type: the new query finds them in the old one's markers
    assert command == ["--query", f"{query}-p3", "--after-query", query], line

    produce_lines(cluster, topics.input, after.lines)
    second = EnrichProcess(cluster, topics, tmp_path / "second", command[1], *command[2:])
    assert second.wait(1200) == 0, second.tail()

    codec = default_codec()
    events = [codec.decode("payment_event", v) for _, v in flat(by_partition(cluster, topics.events))]
    letters = [codec.decode("dead_letter", v) for _, v in flat(by_partition(cluster, topics.dlq))]
    assert Counter(e["event_id"] for e in events) == Counter(before.expected_event_ids() + after.expected_event_ids())
    assert len(events) + len(letters) == len(before.lines) + len(after.lines)  # in = out + DLQ
    places = Counter((d["source_partition"], d["source_offset"]) for d in letters)
    assert max(places.values()) == 1  # no line dead-lettered twice
    wrong = Counter(d["error_class"] for d in letters)["wrong_partition"]
    assert wrong == sum(line.expected == "wrong_partition" for line in (*before.lines, *after.lines))


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_a_running_job_whose_input_gains_a_partition_stops_with_the_procedure(
    cluster: KafkaContext, tmp_path: Path
) -> None:
    """ingest grows to 3 partitions under a running enrich pinned at 2, and a line lands on the new partition: the
    job stops (before: it dead-lettered the line as wrong_partition and then hung in the dead-letter key search)
    with the procedure, and nothing of the new partition is written."""
    stream = mixed_stream(7, payments=120, partitions=2)
    topics = enrich_topics(cluster, stream, 2)
    produce_lines(cluster, topics.input, stream.lines[:40])
    job = EnrichProcess(cluster, topics, tmp_path / "checkpoint", unique("enrich"), "--continuous")
    try:
        assert job.wait_for_batches(1, timeout=900), job.tail()
        grow_topics(cluster, (topics.input,), 3)
        grown = mixed_stream(11, payments=120, partitions=3)
        produce_lines(
            cluster,
            topics.input,
            [line for line in grown.lines if line.partition == 2][:5],
        )
        code = job.wait(timeout=900)  # a hang fails here, it does not hang the suite
    finally:
        job.kill()
    assert code != 0, job.tail()
    log = "".join(job.log)
    assert f"{topics.input}: the input has 3 partitions" in log, job.tail()
    assert "What an operator may change, and how" in log
    codec = default_codec()
    letters = [codec.decode("dead_letter", v) for _, v in flat(by_partition(cluster, topics.dlq))]
    assert all(d["source_partition"] != 2 for d in letters)


def printed_command(line: str) -> list[str]:
    """The options of the query the refusal says continues the old one: what the operator types, as printed."""
    found = re.search(r"continues this one: (--query .*?) and a fresh --checkpoint", line)
    assert found is not None, line
    return shlex.split(found.group(1))


def committed_batch(cluster: KafkaContext, query: str, partition: int) -> int:
    """The batch of (query, partition)'s newest committed marker, -1 without one."""
    found = read_marker(cluster, "ikkai", query, partition, topic=commits_topic_for("ikkai", query))
    return -1 if found is None else found.batch_id


def each_line_once(lines: Sequence[RawLine], events: list[dict[str, Any]], letters: list[dict[str, Any]]) -> None:
    """Every input line is in the output exactly once, as an event or as a dead letter at its own position.

    Lines of one event_id (a retried event) are one group: as many outputs as lines, events and dead letters
    together, whichever line the event is (a line the new layout dead-letters lets a retry of it be the event).
    """
    seen: Counter[int] = Counter()
    positions = []
    for line in lines:
        positions.append((line.partition, seen[line.partition]))
        seen[line.partition] += 1
    letters_at = Counter((d["source_partition"], d["source_offset"]) for d in letters)
    events_of = Counter(e["event_id"] for e in events)
    groups: dict[str | None, list[tuple[int, int]]] = {}
    for line, position in zip(lines, positions, strict=True):
        groups.setdefault(line.event_id, []).append(position)
    assert set(letters_at) <= set(positions) and set(events_of) <= set(groups) - {None}, "an output of no line"
    lines_of: dict[str, int] = {"written again": 0, "skipped": 0}
    for event_id, places in groups.items():
        if event_id is None:  # no event id: each such line a dead letter of its own
            outputs = [letters_at[p] for p in places]
            lines_of["written again"] += sum(n - 1 for n in outputs if n > 1)
            lines_of["skipped"] += outputs.count(0)
            continue
        written = events_of[event_id] + sum(letters_at[p] for p in places)
        lines_of["written again" if written > len(places) else "skipped"] += abs(written - len(places))
    assert lines_of == {"written again": 0, "skipped": 0}, f"{lines_of} of {len(lines)} lines"


@pytest.mark.integration
@pytest.mark.timeout(2400)  # four enrich runs in a row: slow on a loaded 2-core machine
def test_a_batch_committed_on_one_output_partition_only_goes_on_after_the_growth_with_each_line_once(
    cluster: KafkaContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43, case 6, the crash state built on purpose: enrich (routed) on 2 partitions commits a batch on one
    output partition and is killed before the other commits (the sink's pause point holds the first write at its
    commit; the other partition's marker is seen committed; then kill -9). Every topic grows to 3; the old query is
    refused and the job is started with exactly the command the refusal prints. A read_committed reader sees every
    input line once, as an event or a dead letter: none skipped, none written again; and again after that query hands
    over to one of its own layout (an output partition all of whose records the old query held still gets a marker).
    Mutations: the old-layout filter dropped; enrich routed by key with the old count; no marker when every record
    was held (then the third query writes the old query's lines again)."""
    stream = mixed_stream(7, payments=120, partitions=2)
    half = len(stream.lines) // 2
    topics = enrich_topics(cluster, stream, 2)
    produce_lines(cluster, topics.input, stream.lines[:half])
    query, checkpoint = unique("enrich"), tmp_path / "first"
    first = EnrichProcess(cluster, topics, checkpoint, query)
    assert first.wait(1200) == 0, first.tail()

    produce_lines(cluster, topics.input, stream.lines[half:])
    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv(PAUSE_BEFORE_COMMIT, str(pause))  # the job, its executor and its writer inherit it
    crashed = EnrichProcess(cluster, topics, checkpoint, query)
    monkeypatch.delenv(PAUSE_BEFORE_COMMIT)
    try:
        give_up_at = time.monotonic() + 1200
        while not (pause / "paused").exists():  # the first write at its commit holds its transaction open
            assert crashed.process.poll() is None and time.monotonic() < give_up_at, crashed.tail()
            time.sleep(0.2)
        paused = json.loads((pause / "paused").read_text())
        other = 1 - paused["partition"]
        while committed_batch(cluster, query, other) < paused["batch"]:  # the other partition's transaction commits
            assert crashed.process.poll() is None and time.monotonic() < give_up_at, crashed.tail()
            time.sleep(0.5)
    finally:
        crashed.kill()  # kill -9, the whole job; then its executor's writer, which holds the paused transaction
        if (pause / "paused").exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(json.loads((pause / "paused").read_text())["pid"], signal.SIGKILL)
    assert not (pause / "outcome").exists(), "the paused transaction must not have committed"

    grow_topics(cluster, (topics.input, topics.events, topics.dlq), 3)
    refused = EnrichProcess(cluster, topics, checkpoint, query)
    assert refused.wait(1200) == 1, refused.tail()
    [line] = error_lines(refused)
    command = printed_command(line)
    assert command[:4] == ["--query", f"{query}-p3", "--after-query", query], line
    second = EnrichProcess(cluster, topics, tmp_path / "second", command[1], *command[2:])
    assert second.wait(1200) == 0, second.tail()

    codec = default_codec()
    events = [codec.decode("payment_event", v) for _, v in flat(by_partition(cluster, topics.events))]
    letters = [codec.decode("dead_letter", v) for _, v in flat(by_partition(cluster, topics.dlq))]
    print(f"the refusal printed: {' '.join(command)}")  # shown with a failure: what was run
    each_line_once(stream.lines, events, letters)
    assert len(events) + len(letters) == len(stream.lines)  # in = out + DLQ

    # The new query hands over in turn, to a query of its own layout: that one has no origin of another layout to
    # filter by, so it must find everything the old query committed under the new query's markers.
    third = EnrichProcess(cluster, topics, tmp_path / "third", f"{query}-r", "--after-query", command[1])
    assert third.wait(1200) == 0, third.tail()
    events = [codec.decode("payment_event", v) for _, v in flat(by_partition(cluster, topics.events))]
    letters = [codec.decode("dead_letter", v) for _, v in flat(by_partition(cluster, topics.dlq))]
    each_line_once(stream.lines, events, letters)

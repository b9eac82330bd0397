"""Adding partitions (issue 27, item 3): refused in one line with the query that continues exactly, never a hang.

The procedure (docs/exactly-once.md, "What an operator may change, and how": partitions): stop what
writes the input, let the job drain and stop, grow every topic of its layout to one count, and start
it as a new query that takes over from the old one (``--query``, ``--after-query``, a fresh
``--checkpoint``) with the ``--start-offsets`` its refusal prints. The unit tests build the stale or
grown answers with fakes; the integration tests run the enrich job on the real stack and count what
read_committed readers see.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from demo.payments_simulation import DAY_MS, START_MS, generate_profiles
from demo.pipeline_io import by_partition, create_topic, flat, unique
from demo.raw_payments import MixedStream, mixed_stream, produce_lines
from ikkai.contract import kafka
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from spark_jobs.enrich.master_data import publish_profiles
from spark_jobs.sink import transactional_sink
from spark_jobs.sink.commit_markers import CommitMarker, CommitMarkerError
from spark_jobs.sink.input_identity import completed_offsets
from spark_jobs.sink.transactional_sink import SinkConfig, check_topics, grown_layout_start, refuse_a_grown_layout
from tests.spark_jobs.enrich_process import EnrichProcess, EnrichTopics

pytestmark = pytest.mark.heavy


def config(partitions: int = 3) -> SinkConfig:
    return SinkConfig(
        app="ikkai", query="enrich", cluster=KafkaContext.of("b:9092"), output_topics=("events.x", "dlq.x"),
        partitions=partitions, order_by=("input_partition", "input_offset"), source_topic="ingest.x",
    )  # fmt: skip


def marker(partition: int, offsets: dict[int, int], partitions: int = 2) -> CommitMarker:
    return CommitMarker("ikkai", "enrich", partition, 9, partitions, 5, "ingest.x", offsets)


def test_a_grown_layout_is_refused_with_the_new_query_and_where_it_starts() -> None:
    """Markers pinned at 2, topics grown to 3: the fix names the new query, the handover from this one and, per input
    partition, offsets below which every record is committed: the drained checkpoint's ends when it shows them."""
    markers = {0: marker(0, {0: 120, 1: 7}), 1: marker(1, {1: 80})}
    with pytest.raises(CommitMarkerError) as refused:
        refuse_a_grown_layout(config(3), markers, completed={0: 120, 1: 80})
    text = str(refused.value)
    assert "query enrich committed with 2 partitions, the topics now have 3" in text
    assert "--query enrich-p3 --after-query enrich --start-offsets 0:120,1:80 and a fresh --checkpoint (" in text
    refuse_a_grown_layout(config(2), markers)  # the same layout: nothing to say


def test_a_grown_layout_never_prints_offsets_that_skip_a_record() -> None:
    """Issue 43, case 6: a routed batch committed on output partition 0 (input 0 up to 200) but not on 1 (up to 150).
    The highest offset (200) would skip input records 150-199 routed to partition 1. Without a drained checkpoint the
    lowest is printed (nothing skipped, some written again, and the fix says so); a checkpoint whose last batch ends
    below the markers (older than them) is no proof either."""
    markers = {0: marker(0, {0: 200, 1: 40}), 1: marker(1, {0: 150})}
    assert grown_layout_start(config(3), markers, None) == ({0: 150, 1: 0}, False)
    assert grown_layout_start(config(3), markers, {0: 150, 1: 40}) == ({0: 150, 1: 0}, False)
    assert grown_layout_start(config(3), markers, {0: 210, 1: 40}) == ({0: 210, 1: 40}, True)
    in_place = dataclasses.replace(config(3), partition_column="input_partition")
    exact = {0: marker(0, {0: 200}), 1: marker(1, {1: 40})}  # in place: output p holds only input p's records
    assert grown_layout_start(in_place, exact, None) == ({0: 200, 1: 40}, True)
    with pytest.raises(CommitMarkerError) as refused:
        refuse_a_grown_layout(config(3), markers)
    text = str(refused.value)
    assert "--start-offsets 0:150,1:0 and a fresh --checkpoint (no drain is shown" in text and "\n" not in text


def test_a_checkpoint_shows_its_ends_only_when_its_last_batch_is_committed(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for batch, ends in ((0, {"0": 5, "1": 7}), (1, {"0": 120, "1": 80})):
        (tmp_path / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps({"ingest.x": ends})}'
        )
    (tmp_path / "commits" / "0").write_text("v1\n{}")
    assert completed_offsets(tmp_path, "ingest.x") is None  # batch 1 planned, not committed
    (tmp_path / "commits" / "1").write_text("v1\n{}")
    assert completed_offsets(tmp_path, "ingest.x") == {0: 120, 1: 80}
    assert completed_offsets(tmp_path, "other") is None and completed_offsets(tmp_path / "none", "ingest.x") is None
    assert completed_offsets("hdfs://nn/ck", "ingest.x") is None


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


def enrich_topics(bootstrap: str, stream: MixedStream, partitions: int) -> EnrichTopics:
    """Master data first, then the input, events and DLQ topics of ``partitions`` partitions."""
    name = unique("grow")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"masterdata.merchants.{name}",
                          f"masterdata.customers.{name}")  # fmt: skip
    merchants, customers = generate_profiles(stream.world, stream.seed)
    publish_profiles(KafkaContext.of(bootstrap), merchants, customers, merchants_topic=topics.merchants,
                     customers_topic=topics.customers, transactional_id=unique("test.masterdata"))  # fmt: skip
    for topic in (topics.input, topics.events, topics.dlq):
        create_topic(bootstrap, topic, partitions)
    return topics


def grow(bootstrap: str, count: int, *names: str) -> None:
    admin = AdminClient(KafkaContext.of(bootstrap).client_config())
    for future in admin.create_partitions([NewPartitions(name, count) for name in names]).values():
        future.result(timeout=60)
    kafka.wait_until_usable(KafkaContext.of(bootstrap), names, give_up_at=time.monotonic() + 120)


def error_lines(job: EnrichProcess) -> list[str]:
    return [line for line in job.log if line.startswith("ikkai: error: ")]


@pytest.mark.integration
@pytest.mark.timeout(2400)  # three enrich runs in a row: slow on a loaded 2-core machine
def test_partitions_added_between_runs_go_on_as_a_new_query_with_nothing_lost_or_twice(
    bootstrap: str, tmp_path: Path
) -> None:
    """The procedure, end to end: enrich drains ingest on 2 partitions; every topic of its layout grows to 3; the
    same query is refused at start in one line naming the new query, its handover and its --start-offsets (exact:
    its checkpoint shows the drain); that new query then
    decides the lines written with 3 partitions. A read_committed reader sees every line of both streams once, as
    an event or a dead letter, and no event twice. (Before: records of the new partition were dead-lettered as
    wrong_partition and the dead-letter key search never ended.)"""
    before = mixed_stream(7, payments=120, partitions=2)
    # An hour later: the new query rebuilds each old partition's event-time state (watermark, dedupe) from the
    # lines before the cut, so lines written after the growth must be later than those, as they are in life.
    after = mixed_stream(11, payments=120, partitions=3, start_ms=START_MS + DAY_MS + 3_600_000)
    topics = enrich_topics(bootstrap, before, 2)
    produce_lines(bootstrap, topics.input, before.lines)
    query = unique("enrich")
    first = EnrichProcess(bootstrap, topics, tmp_path / "first", query)
    assert first.wait(1200) == 0, first.tail()

    grow(bootstrap, 3, topics.input, topics.events, topics.dlq)
    refused = EnrichProcess(bootstrap, topics, tmp_path / "first", query)
    assert refused.wait(1200) == 1, refused.tail()
    [line] = error_lines(refused)  # one line: what, where, what to do
    assert f"query {query} committed with 2 partitions, the topics now have 3" in line
    found = re.search(r"--query (\S+) --after-query (\S+) --start-offsets (\S+) and a fresh --checkpoint \(", line)
    assert found is not None and found.groups()[:2] == (f"{query}-p3", query), line  # drained: exact, no note

    produce_lines(bootstrap, topics.input, after.lines)
    new_query, _, start = found.groups()
    second = EnrichProcess(bootstrap, topics, tmp_path / "second", new_query, "--after-query", query,
                           "--start-offsets", start)  # fmt: skip
    assert second.wait(1200) == 0, second.tail()

    codec = default_codec()
    events = [codec.decode("payment_event", v) for _, v in flat(by_partition(bootstrap, topics.events))]
    letters = [codec.decode("dead_letter", v) for _, v in flat(by_partition(bootstrap, topics.dlq))]
    assert Counter(e["event_id"] for e in events) == Counter(before.expected_event_ids() + after.expected_event_ids())
    assert len(events) + len(letters) == len(before.lines) + len(after.lines)  # in = out + DLQ
    places = Counter((d["source_partition"], d["source_offset"]) for d in letters)
    assert max(places.values()) == 1  # no line dead-lettered twice
    wrong = Counter(d["error_class"] for d in letters)["wrong_partition"]
    assert wrong == sum(line.expected == "wrong_partition" for line in (*before.lines, *after.lines))


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_a_running_job_whose_input_gains_a_partition_stops_with_the_procedure(bootstrap: str, tmp_path: Path) -> None:
    """ingest grows to 3 partitions under a running enrich pinned at 2, and a line lands on the new partition: the
    job stops (before: it dead-lettered the line as wrong_partition and then hung in the dead-letter key search)
    with the procedure, and nothing of the new partition is written."""
    stream = mixed_stream(7, payments=120, partitions=2)
    topics = enrich_topics(bootstrap, stream, 2)
    produce_lines(bootstrap, topics.input, stream.lines[:40])
    job = EnrichProcess(bootstrap, topics, tmp_path / "checkpoint", unique("enrich"), "--continuous")
    try:
        assert job.wait_for_batches(1, timeout=900), job.tail()
        grow(bootstrap, 3, topics.input)
        grown = mixed_stream(11, payments=120, partitions=3)
        produce_lines(bootstrap, topics.input, [line for line in grown.lines if line.partition == 2][:5])
        code = job.wait(timeout=900)  # a hang fails here, it does not hang the suite
    finally:
        job.kill()
    assert code != 0, job.tail()
    log = "".join(job.log)
    assert f"{topics.input}: the input has 3 partitions" in log, job.tail()
    assert "What an operator may change, and how" in log
    codec = default_codec()
    letters = [codec.decode("dead_letter", v) for _, v in flat(by_partition(bootstrap, topics.dlq))]
    assert all(d["source_partition"] != 2 for d in letters)

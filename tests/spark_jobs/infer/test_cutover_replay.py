"""The cut is real: every deciding change is a recorded cut, and a replay decides each range by its version.

One live query decides a topic in three stretches: the shipped model (v1), then a model with other
thresholds (v2), then v2's artifact with one corrected feature snapshot row (v3), each a restart of the
same query. The third run is continuous and is asked for a replay of the whole topic into ``*.replay``
topics (``--replay-requests``). An independent read_committed reader then judges: the markers record
the three versions and where each took over, and the replay wrote the live bytes, partition by partition,
each input range decided by the version that decided it live.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.ids import decision_id
from ikkai.contract.kafka import KafkaContext
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, deciding_version
from spark_jobs.model.training import as_of_snapshots
from spark_jobs.replay_query import read_outcome, request_replay
from spark_jobs.sink.commit_markers import CommitMarker, commits_topic_for, read_markers
from stack.kit.topic_io import Partitioned, by_partition, create_topic, flat, produce_payments, unique

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

PARTITIONS = 2
STRETCHES = (90, 70, 60)  # events decided by v1, v2, v3
SUFFIX = ".replay"
GIVE_UP_S = 900  # a bound for a stuck job on a loaded 2-core machine, not a speed claim


def topics_of(cluster: KafkaContext) -> InferTopics:
    name = unique("cut")
    topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.input, topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, PARTITIONS)
    for topic in (topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic + SUFFIX, PARTITIONS)  # the replay's: the job never creates topics
    return topics


def corrected_snapshots(events: list[dict[str, object]]) -> bytes:
    """The shipped snapshots with one row corrected: the row the first event of the last stretch joins."""
    snapshots = pd.read_csv(FEATURES_PATH, dtype={"customer_id": str, "home_country": str, "valid_from": "int64"})
    event = events[sum(STRETCHES[:2])]
    payment = pd.DataFrame([{"customer_id": event["customer_id"], "event_time": event["event_time"]}])
    joined = as_of_snapshots(payment, snapshots)
    assert not pd.isna(joined.loc[0, "features_as_of"]), "the event must join a snapshot row"
    row = (snapshots["customer_id"] == event["customer_id"]) & (
        snapshots["valid_from"] == joined.loc[0, "features_as_of"]
    )
    assert row.sum() == 1
    snapshots.loc[row, "chargebacks_365d"] += 3  # the correction: three chargebacks the first export missed
    out = io.StringIO()
    snapshots.to_csv(out, index=False, float_format="%.6f")
    return out.getvalue().encode()


def digests(records: Partitioned) -> dict[int, str]:
    """Per partition, the sha-256 of its records (key and value, in offset order)."""
    found = {}
    for partition, rows in records.items():
        digest = hashlib.sha256()
        for key, value in rows:
            for part in (key or b"", value or b""):
                digest.update(len(part).to_bytes(8, "big") + part)
        found[partition] = digest.hexdigest()
    return found


def run_to_end(cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, *extra: str) -> None:
    job = InferProcess(cluster, topics, checkpoint, query, *extra)
    assert job.wait(GIVE_UP_S) == 0, job.tail()


@pytest.fixture(scope="module")
def scene(cluster: KafkaContext, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Three stretches decided by three versions of one live query, then a replay of the whole topic."""
    folder = tmp_path_factory.mktemp("cut")
    events = payment_records(simulate(31, payments=sum(STRETCHES)).payments)
    v2_model = folder / "v2" / "model.json"
    v2_model.parent.mkdir()
    document = json.loads(MODEL_PATH.read_bytes())
    document["thresholds"] = {"hold": 0.3, "review": 0.12}  # another artifact: other actions for many payments
    v2_model.write_bytes(json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    v3_features = folder / "v3" / "customer_features.csv"
    v3_features.parent.mkdir()
    v3_features.write_bytes(corrected_snapshots(events))
    versions = (
        deciding_version(MODEL_PATH.read_bytes(), FEATURES_PATH.read_bytes()),
        deciding_version(v2_model.read_bytes(), FEATURES_PATH.read_bytes()),
        deciding_version(v2_model.read_bytes(), v3_features.read_bytes()),
    )
    topics, query, store = topics_of(cluster), unique("live"), ("--model-store", str(folder / "store"))
    checkpoint = folder / "checkpoint"
    first, second = STRETCHES[0], sum(STRETCHES[:2])
    produce_payments(cluster, topics.input, events[:first], PARTITIONS)
    run_to_end(cluster, topics, checkpoint, query, *store)
    produce_payments(cluster, topics.input, events[first:second], PARTITIONS)
    run_to_end(cluster, topics, checkpoint, query, "--model", str(v2_model), *store)
    produce_payments(cluster, topics.input, events[second:], PARTITIONS)
    requests = folder / "requests"
    done = request_replay(requests, f"{query}-replay", str(folder / "replay"), SUFFIX)
    live = InferProcess(
        cluster, topics, checkpoint, query, "--model", str(v2_model), "--features", str(v3_features), *store,
        "--continuous", "--replay-requests", str(requests),
    )  # fmt: skip
    give_up_at = time.monotonic() + GIVE_UP_S
    try:
        while (outcome := read_outcome(done)) is None and live.process.poll() is None:
            assert time.monotonic() < give_up_at, live.tail()
            time.sleep(0.5)
        while live.process.poll() is None and len(flat(by_partition(cluster, topics.decisions))) < len(events):
            assert time.monotonic() < give_up_at, live.tail()
            time.sleep(1)
    finally:
        live.kill()
    written = {t: by_partition(cluster, t) for t in (topics.decisions, topics.outbox, topics.dlq)}
    replayed = {t: by_partition(cluster, t + SUFFIX) for t in written}
    markers = read_markers(cluster, "ikkai", query, topic=commits_topic_for("ikkai", query))
    return {
        "events": events, "versions": versions, "written": written, "replayed": replayed, "markers": markers,
        "outcome": outcome, "log": "".join(live.log[-40:]),
    }  # fmt: skip


def decided(records: Partitioned) -> list[dict[str, Any]]:
    codec = default_codec()
    return [codec.decode("fraud_decision", value) for _, value in flat(records)]


def test_a_replay_decides_each_recorded_range_by_its_version_and_writes_the_live_bytes(
    scene: dict[str, object],
) -> None:
    """Per partition of every output topic, the replay's digest is the live one's; its decisions carry the three
    versions, each on the offsets the live markers' cuts give it. Mutation: the replay ignores the cut (today's
    model for every offset): the v1 and v2 ranges differ."""
    assert scene["outcome"] == {"ok": True}, scene["log"]
    written, replayed = scene["written"], scene["replayed"]
    assert isinstance(written, dict) and isinstance(replayed, dict)
    for topic, records in written.items():
        assert digests(replayed[topic]) == digests(records), topic
    events = scene["events"]
    assert isinstance(events, list)
    decisions = decided(replayed[next(iter(written))])
    assert Counter(d["event_id"] for d in decisions) == Counter(str(e["event_id"]) for e in events)
    assert Counter(d["model_version"] for d in decisions) == Counter(
        dict(zip(scene["versions"], STRETCHES, strict=True))
    )  # type: ignore[arg-type]
    markers = scene["markers"]
    assert isinstance(markers, dict)
    for d in decisions:  # each input offset decided by the version whose cut covers it
        marker: CommitMarker = markers[d["input_partition"]]
        covering = [c.version for c in marker.cuts if c.from_offsets.get(d["input_partition"], 0) <= d["input_offset"]]
        assert d["model_version"] == covering[-1]


def test_a_corrected_feature_snapshot_row_is_a_new_version_and_a_cut_in_the_markers(
    scene: dict[str, object],
) -> None:
    """The third run changed one snapshot row only (the same artifact as the second): its writer version is
    another, each marker records a cut to it at the offsets where it took over, and its decisions carry it (so
    their decision ids differ from what v2 would have given them). Mutation: the snapshots left out of the
    writer version's digest (v3 == v2: no cut, the decisions not distinguishable)."""
    markers = scene["markers"]
    assert isinstance(markers, dict) and sorted(markers) == list(range(PARTITIONS))
    for marker in markers.values():  # what the job recorded: three versions, the last two of one artifact
        recorded = [c.version for c in marker.cuts]
        assert len(set(recorded)) == 3 and recorded[1].split("-")[:3] == recorded[2].split("-")[:3], recorded
    v1, v2, v3 = scene["versions"]  # type: ignore[misc]
    written = scene["written"]
    assert isinstance(written, dict)
    decisions = decided(written[next(iter(written))])
    for partition, marker in markers.items():
        assert marker.writer_version == v3
        assert [c.version for c in marker.cuts] == [v1, v2, v3]
        first_v3 = min(
            d["input_offset"] for d in decisions if d["input_partition"] == partition and d["model_version"] == v3
        )
        assert marker.cuts[2].from_offsets == {partition: first_v3}
    for d in decisions:  # each decision's id is derived from the version that decided it
        assert d["decision_id"] == decision_id(d["payment_id"], d["event_id"], d["model_version"])

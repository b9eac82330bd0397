"""The pure parts of benchmarks/peer_streams.py: the comparison of the peer's output with ``decide`` and the build key.

No Kafka and no JVM here; the script's own check compares a real run of the peer.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from benchmarks.peer_streams import compare_outputs, source_digest
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from spark_jobs.infer.fraud_decisions import Topics, decide
from spark_jobs.model.fraud_model import FraudModel, load_snapshots

Records = dict[int, list[tuple[bytes | None, bytes | None]]]


def _decided(payments: int = 300) -> pd.DataFrame:
    codec = default_codec()
    rows = [
        (str(p["payment_id"]).encode(), codec.encode("payment_event", p, version=1), "events.payments", i % 2, i // 2)
        for i, p in enumerate(payment_records(simulate(5, payments=payments).payments))
    ]
    frame = pd.DataFrame(rows, columns=["key", "value", "topic", "partition", "offset"])
    return decide(frame, FraudModel.load(), load_snapshots(), codec, Topics("decisions", "outbox", "dlq"))


def _as_topics(expected: pd.DataFrame) -> tuple[Records, Records]:
    """``decide``'s rows as a faithful peer would write them: per input partition, in input-offset order."""
    decisions: Records = {0: [], 1: []}
    outbox: Records = {0: [], 1: []}
    for r in expected.sort_values(["input_partition", "input_offset", "seq"]).itertuples(index=False):
        (decisions if r.topic == "decisions" else outbox)[int(r.input_partition)].append((bytes(r.key), bytes(r.value)))
    return decisions, outbox


def test_the_same_bytes_match_everywhere() -> None:
    expected = _decided()
    decisions, outbox = _as_topics(expected)
    check = compare_outputs(expected, decisions, outbox, "faithful")
    assert (check.events, check.decisions_same) == (300, 300)
    assert check.outbox_expected > 0
    assert check.outbox_same == check.outbox_expected
    assert check.partitions_kept
    assert check.examples == ()


def test_a_score_one_bit_off_is_a_mismatch_named_by_its_field() -> None:
    expected = _decided()
    decisions, outbox = _as_topics(expected)
    codec = default_codec()
    key, value = decisions[0][3]
    assert value is not None
    record = codec.decode("fraud_decision", value)
    record["score"] = math.nextafter(record["score"], 1.0)
    decisions[0][3] = (key, codec.encode("fraud_decision", record))
    check = compare_outputs(expected, decisions, outbox, "one bit off")
    assert check.decisions_same == 299
    assert len(check.examples) == 1
    assert "score: peer" in check.examples[0]


def test_output_on_another_partition_or_out_of_order_is_reported() -> None:
    expected = _decided()
    decisions, outbox = _as_topics(expected)
    decisions[0][0], decisions[0][1] = decisions[0][1], decisions[0][0]
    assert not compare_outputs(expected, decisions, outbox, "reordered").partitions_kept
    decisions, outbox = _as_topics(expected)
    decisions[1].append(decisions[0].pop())
    assert not compare_outputs(expected, decisions, outbox, "moved").partitions_kept


def test_the_build_key_changes_with_the_sources(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "src" / "A.java").write_text("class A {}")
    before = source_digest(tmp_path)
    assert source_digest(tmp_path) == before
    (tmp_path / "src" / "A.java").write_text("class A { }")
    assert source_digest(tmp_path) != before

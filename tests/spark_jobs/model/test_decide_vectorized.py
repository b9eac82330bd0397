"""The vectorized ``decide`` writes the bytes the row-by-row one wrote (rule 4: same input, same output).

``_decide_row_by_row`` is ``fraud_decisions.decide`` as it was before it was vectorized (commit
260b850), kept here as the reference: one ``codec.decode`` and one ``codec.encode`` per record.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import numpy as np
import pandas as pd
import pytest

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import RecordCodec, SchemaError, default_codec
from ikkai.contract.ids import decision_id
from spark_jobs.infer.fraud_decisions import Topics, decide, decide_arrow, outbox_requests
from spark_jobs.model.fraud_model import FEATURES, SNAPSHOT_TYPES, FraudModel, Snapshots, load_snapshots
from spark_jobs.model.training import as_of_snapshots, feature_frame
from spark_jobs.sink.dead_letters import reason_text


def _old_dead_letter(row: Any, error: SchemaError, codec: RecordCodec, topics: Topics) -> tuple[Any, ...]:
    reason = reason_text(error)  # the reason rule came later (bounded, card numbers masked): both paths keep it
    record = {
        "stage": "infer", "source_topic": row.topic, "source_partition": int(row.partition),
        "source_offset": int(row.offset), "key": None if row.key is None else bytes(row.key),
        "value": None if row.value is None else bytes(row.value), "reason": reason,
        "error_class": type(error).__name__, "source_timestamp": 0,
        "headers": {"ikkai.dlq.stage": "infer", "ikkai.dlq.error_class": type(error).__name__,
                    "ikkai.dlq.reason": reason},
    }  # fmt: skip
    key = bytes(row.key) if row.key is not None else f"{row.topic}-{row.partition}-{row.offset}".encode()
    return (topics.dlq, key, codec.encode("dead_letter", record), None, int(row.partition), int(row.offset), 0,
            record["headers"])  # fmt: skip


def _decide_row_by_row(
    rows: pd.DataFrame, model: FraudModel, file: Snapshots, codec: RecordCodec, topics: Topics
) -> pd.DataFrame:
    snapshots = _snapshot_frame(file)
    out: list[tuple[Any, ...]] = []
    payments: list[dict[str, Any]] = []
    sources: list[Any] = []
    for row in rows.itertuples(index=False):
        try:
            payments.append(codec.decode("payment_event", bytes(row.value)))
            sources.append(row)
        except SchemaError as exc:
            out.append(_old_dead_letter(row, exc, codec, topics))
    if payments:
        frame = pd.DataFrame(payments)
        joined = as_of_snapshots(frame, snapshots)
        features = feature_frame(joined)
        scores = model.score(features)
        actions = model.actions(scores)
        as_of = joined["features_as_of"]
        for i, (payment, source) in enumerate(zip(payments, sources, strict=True)):
            decision = {
                "decision_id": decision_id(payment["payment_id"], payment["event_id"], model.version),
                "payment_id": payment["payment_id"], "event_id": payment["event_id"], "model_version": model.version,
                "score": float(scores[i]), "action": str(actions[i]),
                "features": {name: float(features[name].iat[i]) for name in FEATURES},
                "features_as_of": None if pd.isna(as_of.iat[i]) else int(as_of.iat[i]),
                "event_time": payment["event_time"], "input_topic": source.topic,
                "input_partition": int(source.partition), "input_offset": int(source.offset),
            }  # fmt: skip
            key = payment["payment_id"].encode()
            where = (int(source.partition), int(source.offset))
            out.append((topics.decisions, key, codec.encode("fraud_decision", decision), None, *where, 0, None))
            for seq, request in enumerate(outbox_requests(decision, payment["customer_id"]), start=1):
                out.append((topics.outbox, key, codec.encode("outbox_request", request), None, *where, seq, None))
    columns = ["topic", "key", "value", "timestamp", "input_partition", "input_offset", "seq", "headers"]
    return pd.DataFrame(out, columns=columns).astype(
        {"timestamp": "Int64", "input_partition": np.int32, "input_offset": np.int64, "seq": np.int32}
    )


def _snapshot_frame(snapshots: Snapshots) -> pd.DataFrame:
    """The snapshots as the pandas path read them (``FEATURES_PATH`` by default)."""
    import io

    return pd.read_csv(io.BytesIO(snapshots.data), dtype=SNAPSHOT_TYPES)


def _generated_batch(count: int, seed: int) -> pd.DataFrame:
    """Payments in all three schema versions, with undecodable values among them, as Kafka source rows."""
    codec = default_codec()
    records = payment_records(simulate(seed, payments=count).payments)
    values = [codec.encode("payment_event", r, version=1 + i % 3) for i, r in enumerate(records)]
    values[3] = b'{"payment_id": "json is not allowed here"}'  # not single-object Avro
    values[10] = values[10][:-4]  # truncated body
    values[17] = values[17][:2] + b"\x00" * 8 + values[17][10:]  # unknown writer schema
    values[25] = b""
    rows = pd.DataFrame({
        "key": [str(r["payment_id"]).encode() for r in records], "value": values, "topic": "events.payments",
        "partition": [i % 2 for i in range(count)], "offset": range(1000, 1000 + count),
    })  # fmt: skip
    rows.loc[10, "key"] = None  # a dead letter without a key is keyed by where it came from
    return rows


@pytest.mark.parametrize("seed", [5, 11])
def test_vectorized_decide_writes_the_bytes_the_row_by_row_one_wrote(seed: int) -> None:
    rows, model, snapshots, codec = _generated_batch(3000, seed), FraudModel.load(), load_snapshots(), default_codec()
    old = _decide_row_by_row(rows, model, snapshots, codec, Topics())
    new = decide(rows, model, snapshots, codec, Topics())
    assert list(new.columns) == list(old.columns) and list(new.dtypes) == list(old.dtypes)
    for column in old.columns:
        assert new[column].tolist() == old[column].tolist(), column
    assert new.equals(old)
    actions = {
        default_codec().decode("fraud_decision", v)["action"] for v in old[old["topic"] == "decisions.fraud"]["value"]
    }
    assert actions == {"approve", "review", "hold"}  # every branch of the outbox is exercised
    assert (old["topic"] == "dlq.infer").sum() == 4
    assert json.loads(
        default_codec().decode("outbox_request", old[old["topic"] == "outbox.requests"]["value"].iloc[0])["body"]
    )


def test_the_arrow_path_returns_the_same_rows() -> None:
    import pyarrow as pa

    rows, model, snapshots, codec = _generated_batch(500, 3), FraudModel.load(), load_snapshots(), default_codec()
    expected = decide(rows, model, snapshots, codec, Topics())
    batch = pa.RecordBatch.from_pandas(rows, preserve_index=False)
    got = decide_arrow(batch, model, snapshots, codec, Topics())
    assert got.column("value").to_pylist() == expected["value"].tolist()
    assert got.column("key").to_pylist() == expected["key"].tolist()
    assert got.column("topic").to_pylist() == expected["topic"].tolist()
    assert got.column("seq").to_pylist() == expected["seq"].tolist()
    assert got.column("input_offset").to_pylist() == expected["input_offset"].tolist()
    headers = [None if h is None else list(h.items()) for h in expected["headers"]]
    assert got.column("headers").to_pylist() == headers
    assert got.column("timestamp").null_count == len(expected)


@pytest.mark.parametrize("payment_id", ["pay-1 2", "pay/../x", "pay-客户", "pay#1?x=\r\n"])
def test_a_payment_id_becomes_one_path_segment_the_http_layer_can_carry(payment_id: str) -> None:
    # The outbox contract's rule: a path of visible ASCII, no segment of its own made from the id.
    decision = {"decision_id": "d-1", "payment_id": payment_id, "event_time": 1, "model_version": "m",
                "action": "hold", "score": 0.9}  # fmt: skip
    paths = [request["path"] for request in outbox_requests(decision, "c-1")]
    hold = paths[0]
    assert hold.startswith("/payments/") and hold.endswith("/hold")
    segment = hold.removeprefix("/payments/").removesuffix("/hold")
    assert "/" not in segment and segment.isascii() and segment.isprintable() and " " not in segment
    assert urllib.parse.unquote(segment) == payment_id


def test_an_ordinary_payment_id_is_written_as_it_is() -> None:
    decision = {"decision_id": "d-1", "payment_id": "pay-000123_a.b~c", "event_time": 1, "model_version": "m",
                "action": "review", "score": 0.5}  # fmt: skip
    assert [r["path"] for r in outbox_requests(decision, "c-1")] == ["/payments/pay-000123_a.b~c/review"]

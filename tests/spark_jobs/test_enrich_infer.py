"""The one query's write step: enrich's rows as they are, then the decisions infer would make of its events."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from spark_jobs.enrich_infer import events_and_decisions
from spark_jobs.infer.fraud_decisions import SourceRows, Topics, decided, output_arrow_schema
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, ModelSource

EVENTS, DLQ, INGEST = "events.x", "dlq.enrich.x", "ingest.x"


def _enrich_rows(count: int) -> pa.RecordBatch:
    """Enrich's sink rows: ``count`` events (seq 0) of raw lines at offsets 100.., and one dead letter."""
    codec = default_codec()
    records = payment_records(simulate(7, payments=count).payments)
    values = [codec.encode("payment_event", r) for r in records]
    n = count + 1
    return pa.RecordBatch.from_arrays(
        [
            pa.array([EVENTS] * count + [DLQ]),
            pa.array([str(r["payment_id"]).encode() for r in records] + [b"bad"]),
            pa.array([*values, b"dead letter"]),
            pa.nulls(n, pa.int64()),
            pa.array([i % 2 for i in range(n)], pa.int32()),
            pa.array(range(100, 100 + n), pa.int64()),
            pa.array([0] * n, pa.int32()),
            pa.array([None] * count + [[("ikkai.dlq.stage", "enrich")]], pa.map_(pa.string(), pa.string())),
        ],
        schema=output_arrow_schema(),
    )


def test_the_write_step_keeps_enrich_rows_and_adds_each_events_decision_after_it() -> None:
    enriched = _enrich_rows(300)
    source, model, snapshots = ModelSource.of(MODEL_PATH, FEATURES_PATH)
    out = list(events_and_decisions(iter([enriched]), EVENTS, INGEST, source, Topics(), default_codec()))
    assert out[0].equals(enriched)  # the events topic stays as enrich writes it
    decisions = pa.Table.from_batches(out[1:]).to_pydict()
    events = enriched.slice(0, 300)
    raw = SourceRows(
        events.column("key").to_pylist(),
        events.column("value").to_pylist(),
        [INGEST] * 300,
        events.column("input_partition").to_pylist(),
        events.column("input_offset").to_pylist(),
    )
    expected = decided(raw, model, snapshots, default_codec(), Topics())
    assert decisions["value"] == expected.value and decisions["topic"] == expected.topic
    assert decisions["seq"] == [seq + 1 for seq in expected.seq]  # after the event's own row
    assert decisions["topic"].count(Topics().decisions) == 300
    assert set(decisions["topic"]) >= {Topics().decisions, Topics().outbox}
    everything = pa.Table.from_batches(out).to_pydict()
    order = list(zip(everything["input_partition"], everything["input_offset"], everything["seq"], strict=True))
    assert len(set(order)) == len(order)  # the sink's order_by stays total over events and decisions
    by_line = {
        (p, o): k
        for p, o, k, t in zip(
            everything["input_partition"],
            everything["input_offset"],
            everything["key"],
            everything["topic"],
            strict=True,
        )
        if t == EVENTS
    }
    for p, o, k in zip(decisions["input_partition"], decisions["input_offset"], decisions["key"], strict=True):
        assert by_line[(p, o)] == k  # keyed like its event: the same output partition, the same transaction

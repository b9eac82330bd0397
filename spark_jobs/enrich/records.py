"""The enrich job's per-record steps over pandas chunks (pure: pandas in, pandas out, no Spark session).

- ``classify``: one input partition's new records, in offset order → one row each, either a
  valid event (``outcome = "event"``, the parsed fields) or a rejection (the error_class, the
  reason and the raw key/value). It runs ``enrich.parse`` and then the partition's
  ``EventTimeGate`` (``enrich.dedupe``), whose state the job keeps in Spark's state store.
- ``encode_events``: enriched, transformed rows → ``payment_event`` records for the sink, keyed
  by payment_id. The record is built from the fields of the newest ``payment_event`` version in
  the catalog, each from the row's column of the same name (``card_masked`` from the masked
  ``card_number``), so a column a transform adds reaches the event once a new schema version
  declares it (docs/adding-a-transform.md). A null takes the field's default.
- ``encode_dead_letters``: rejected rows → ``dead_letter`` records for ``dlq.enrich``.

Every input record yields exactly one output record (in = out + DLQ) with the sink's ordering
columns (input partition, input offset, seq 0), so each output partition is written in input
offset order.

DLQ keys: a dead letter is keyed by the ingest record's key when that key belongs to the ingest
record's partition (the usual case: payment_id, rule 1), else by ``<topic>/<partition>/<offset>``
plus the smallest ``~n`` suffix that Kafka's default partitioner maps to the same partition.
Either way dead letters of input partition p land on partition p of ``dlq.enrich``, so that
partition holds input partition p's rejects in offset order whatever the batch boundaries.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ikkai.contract.codec import RecordCodec, SchemaVersion, default_codec
from ikkai.contract.partitioning import kafka_partition
from ikkai.errors import ConfigError
from spark_jobs.avro_batch import encode_columns, encode_records
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.dedupe import EventTimeGate
from spark_jobs.enrich.parse import Rejection, parse_record
from spark_jobs.sink.dead_letters import DEAD_LETTER_KEY_BYTES, cut_copy

EVENT = "event"
STAGE = "enrich"
PARSED_COLUMNS = (
    ("event_id", "string"), ("payment_id", "string"), ("customer_id", "string"), ("merchant_id", "string"),
    ("amount", "string"), ("currency", "string"), ("country", "string"), ("card_present", "boolean"),
    ("channel", "string"), ("card_number", "string"), ("merchant_category_code", "string"), ("status", "string"),
    ("event_time", "long"),
)  # fmt: skip
CLASSIFIED_COLUMNS = (
    ("input_partition", "int"), ("input_offset", "long"), ("ingested_at", "long"), ("key", "binary"),
    ("value", "binary"), ("outcome", "string"), ("reason", "string"), *PARSED_COLUMNS,
)  # fmt: skip
CLASSIFIED_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in CLASSIFIED_COLUMNS)
REJECTION_COLUMNS = ("key", "value", "outcome", "reason")
TRANSFORM_COLUMNS = tuple((name, kind) for name, kind in CLASSIFIED_COLUMNS if name not in REJECTION_COLUMNS)
"""The columns the enrich job hands its transforms: a valid event's position, ingest time and parsed fields."""
EVENT_SCHEMA = "payment_event"
FIELD_COLUMNS = {"card_masked": "card_number"}
"""``payment_event`` fields written from a column of another name; every other field reads its namesake."""
SINK_SCHEMA = (
    "topic string, key binary, value binary, timestamp long, input_partition int, input_offset long, seq int, "
    "headers map<string,string>"  # a dead letter's stage, error class and reason as Kafka headers; null on events
)
ORDER_BY = ("input_partition", "input_offset", "seq")
GATE_STATE_SCHEMA = "gate string"
_MASKED = re.compile(r"^\*+[0-9]{0,4}$")
_SINK_TYPES = {"timestamp": "Int64", "input_partition": np.int32, "input_offset": np.int64, "seq": np.int32}
_SINK_COLUMNS = [c.split()[0] for c in SINK_SCHEMA.split(", ")]


@dataclass(frozen=True)
class EnrichParameters:
    """What decides the output besides the input: part of the job's identity (change it → new query)."""

    input_topic: str
    events_topic: str
    dlq_topic: str
    partitions: int
    lateness_ms: int
    exponents: Mapping[str, int]


def classify(rows: pd.DataFrame, gate: EventTimeGate, parameters: EnrichParameters) -> pd.DataFrame:
    """Rows (``partition, offset, ingested_at, key, value``) of one input partition → ``CLASSIFIED_COLUMNS``."""
    out: list[tuple[Any, ...]] = []
    empty = (None,) * len(PARSED_COLUMNS)
    for row in rows.sort_values("offset", kind="stable").itertuples(index=False):
        key = None if row.key is None else bytes(row.key)
        value = None if row.value is None else bytes(row.value)
        partition, offset, ingested = int(row.partition), int(row.offset), int(row.ingested_at)
        if not 0 <= partition < parameters.partitions:  # the input grew while the job ran: stop, never dead-letter
            raise outside_layout(parameters.input_topic, partition, parameters.partitions)
        parsed = parse_record(key, value, partition, parameters.partitions, ingested, parameters.exponents)
        if isinstance(parsed, Rejection):
            out.append((partition, offset, ingested, key, value, parsed.error_class, parsed.reason, *empty))
            continue
        verdict = gate.decide(parsed.event_id, parsed.payment_id, parsed.event_time)
        fields = tuple(getattr(parsed, name) for name, _ in PARSED_COLUMNS)
        if verdict is None:
            out.append((partition, offset, ingested, None, None, EVENT, "", *fields))
        else:
            out.append((partition, offset, ingested, key, value, verdict[0], verdict[1], *fields))
    gate.evict()
    frame = pd.DataFrame(out, columns=[name for name, _ in CLASSIFIED_COLUMNS])
    return frame.astype({"input_partition": np.int32, "input_offset": np.int64, "ingested_at": np.int64})


def classify_with_state(parameters: EnrichParameters) -> Any:
    """The ``applyInPandasWithState`` function: ``classify`` with the partition's gate in the state store."""

    def run(key: tuple[Any, ...], chunks: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        gate = EventTimeGate.from_json(state.get[0] if state.exists else None, parameters.lateness_ms)
        rows = pd.concat(list(chunks), ignore_index=True)
        result = classify(rows, gate, parameters)
        state.update((gate.to_json(),))
        yield result

    return run


# The dead letter's key search tries at most this many suffixes per partition of the layout. Each try
# lands on a given partition with probability 1/partitions (murmur2 spreads keys evenly), so a search
# that runs out has probability (1 - 1/P)^(64 P) < e^-64; it fails loudly then, it never loops.
KEY_TRIES_PER_PARTITION = 64
REPARTITION_FIX = (
    "the layout is pinned; stop the job, let it drain, grow every topic of the layout to one count, and "
    "start it again: it prints the new --query and its --after-query (docs/exactly-once.md, "
    "'What an operator may change, and how': partitions)"
)


def outside_layout(topic: str, partition: int, partitions: int) -> ConfigError:
    """A record of an input partition the job's pinned layout does not have: the input gained partitions."""
    return ConfigError(
        "enrich", f"{topic} partition {partition}",
        f"the input topic has a partition {partition}, the job's layout {partitions} (0..{partitions - 1})",
        fix=REPARTITION_FIX,
    )  # fmt: skip


def dlq_key(key: bytes | None, topic: str, partition: int, offset: int, partitions: int) -> bytes:
    """The dead letter's key: one that Kafka's default partitioner maps to ``partition`` (module docstring).

    A partition outside the layout has no such key: that is the input's growth, refused (``outside_layout``).
    """
    if not 0 <= partition < partitions:
        raise outside_layout(topic, partition, partitions)
    if key and kafka_partition(key, partitions) == partition:
        return key
    base = f"{topic}/{partition}/{offset}"
    for n in range(KEY_TRIES_PER_PARTITION * partitions):
        candidate = (base if n == 0 else f"{base}~{n}").encode()
        if kafka_partition(candidate, partitions) == partition:
            return candidate
    raise ConfigError(
        "enrich", f"{topic} partition {partition} offset {offset}",
        f"no dead-letter key of {KEY_TRIES_PER_PARTITION * partitions} tried maps to partition {partition} "
        f"of {partitions}", fix="report this bug: murmur2 should have found one",
    )  # fmt: skip


def _is_null(value: Any) -> bool:
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _base_type(avro_type: Any) -> str:
    """The field's type name without null and logical types: ``["null", {"type": "long", ...}]`` → ``long``."""
    if isinstance(avro_type, list):
        branches = [branch for branch in avro_type if branch != "null"]
        return _base_type(branches[0]) if len(branches) == 1 else "union"
    if isinstance(avro_type, dict):
        return _base_type(avro_type["type"])
    return str(avro_type)


_CONVERT: dict[str, Any] = {"long": int, "int": int, "boolean": bool, "double": float, "float": float, "string": str}


def event_record(row: Any, schema: SchemaVersion | None = None) -> dict[str, Any]:
    """One enriched, transformed row → a ``payment_event`` record of ``schema`` (default: the newest version).

    Each field is the row's column of the same name (``FIELD_COLUMNS`` for the one renamed), converted
    to the field's type; a null becomes the field's default (the master-data fields: "unknown", "",
    null). A field with no column, or null with no default, is a ``ConfigError``: the spec lacks the
    transform that writes it.
    """
    if row.amount_minor is None or pd.isna(row.amount_minor):
        raise ConfigError("enrich", "amount_minor", f"is null for the valid amount {row.amount} {row.currency}",
                          fix="the spec must run amount_to_minor_units with output amount_minor")  # fmt: skip
    if not _MASKED.match(row.card_number or ""):
        raise ConfigError("enrich", "card_number", "reached the event unmasked",
                          fix="the transforms spec must run mask_card_number(column: card_number)")  # fmt: skip
    version = schema or default_codec().catalog.get(EVENT_SCHEMA)
    record: dict[str, Any] = {}
    for field in version.schema["fields"]:
        name = field["name"]
        column = FIELD_COLUMNS.get(name, name)
        if not hasattr(row, column):
            raise ConfigError(
                "enrich", name, f"{version.label} has this field but the enriched event has no column {column!r}",
                fix="add the transform that writes it to the transforms spec (docs/adding-a-transform.md)",
            )  # fmt: skip
        value = getattr(row, column)
        if _is_null(value):
            if "default" not in field:
                raise ConfigError("enrich", name, f"is null and {version.label} gives it no default",
                                  fix="make the transform write a value, or give the field a default")  # fmt: skip
            record[name] = field["default"]
        else:
            record[name] = _CONVERT.get(_base_type(field["type"]), lambda v: v)(value)
    return record


def event_columns(chunk: pd.DataFrame, schema: SchemaVersion) -> dict[str, Any]:
    """``event_record`` of every row of ``chunk``, column by column: field name → one value per row.

    The same values (each converted to its field's type, a null replaced by the field's default)
    and, for bad rows, the same ``ConfigError`` as ``event_record`` gives the first bad row.
    """
    count = len(chunk)
    problems: list[tuple[int, int, ConfigError]] = []  # (row, which check of the row, error): the first one wins
    amount_null = chunk["amount_minor"].isna().to_numpy()
    if amount_null.any():
        i = int(amount_null.argmax())
        amount = f"{chunk['amount'].iat[i]} {chunk['currency'].iat[i]}"
        fix = "the spec must run amount_to_minor_units with output amount_minor"
        problems.append(
            (i, 0, ConfigError("enrich", "amount_minor", f"is null for the valid amount {amount}", fix=fix))
        )
    unmasked = next((i for i, card in enumerate(chunk["card_number"].tolist()) if not _MASKED.match(card or "")), None)
    if unmasked is not None:
        fix = "the transforms spec must run mask_card_number(column: card_number)"
        problems.append((unmasked, 1, ConfigError("enrich", "card_number", "reached the event unmasked", fix=fix)))
    columns: dict[str, Any] = {}
    for position, field in enumerate(schema.schema["fields"], start=2):
        name = field["name"]
        column = FIELD_COLUMNS.get(name, name)
        if column not in chunk.columns:
            problems.append((0, position, ConfigError(
                "enrich", name, f"{schema.label} has this field but the enriched event has no column {column!r}",
                fix="add the transform that writes it to the transforms spec (docs/adding-a-transform.md)",
            )))  # fmt: skip
            continue
        series = chunk[column]
        nulls = series.isna().to_numpy()
        convert = _CONVERT.get(_base_type(field["type"]), lambda v: v)
        if not nulls.any():
            if convert is int and series.dtype.kind == "i":  # a whole numpy column: encode_columns takes it as is
                columns[name] = series.to_numpy(np.int64)
            else:
                columns[name] = [convert(v) for v in series.tolist()]
            continue
        if "default" not in field:
            problems.append((int(nulls.argmax()), position, ConfigError(
                "enrich", name, f"is null and {schema.label} gives it no default",
                fix="make the transform write a value, or give the field a default",
            )))  # fmt: skip
            continue
        default = field["default"]
        columns[name] = [default if null else convert(v) for v, null in zip(series.tolist(), nulls, strict=True)]
    if problems:
        raise min(problems, key=lambda problem: problem[:2])[2]
    assert all(len(values) == count for values in columns.values())
    return columns


def encode_events(
    chunks: Iterator[pd.DataFrame], codec: RecordCodec, parameters: EnrichParameters
) -> Iterator[pd.DataFrame]:
    """``mapInPandas``: events → sink rows on ``parameters.events_topic``, keyed by payment_id.

    The values are encoded a chunk at a time (``avro_batch.encode_columns``): the bytes of
    ``codec.encode(EVENT_SCHEMA, event_record(row))`` for every row.
    """
    schema = codec.catalog.get(EVENT_SCHEMA)
    for chunk in chunks:
        count = len(chunk)
        values = encode_columns(codec, EVENT_SCHEMA, event_columns(chunk, schema), count, version=schema.version)
        yield pd.DataFrame({
            "topic": parameters.events_topic, "key": [payment.encode() for payment in chunk["payment_id"].tolist()],
            "value": values, "timestamp": [None] * count, "input_partition": chunk["input_partition"].to_numpy(),
            "input_offset": chunk["input_offset"].to_numpy(), "seq": 0, "headers": [None] * count,
        }, index=range(count), columns=_SINK_COLUMNS).astype(_SINK_TYPES)  # fmt: skip


def dead_letter_record(row: Any, parameters: EnrichParameters) -> dict[str, Any]:
    """The ``dead_letter`` for a rejected row; a key or value too large is copied cut (``dead_letters``)."""
    key, value, cut = cut_copy(
        None if row.key is None else bytes(row.key), None if row.value is None else bytes(row.value)
    )
    headers = {r.STAGE_HEADER: STAGE, r.ERROR_CLASS_HEADER: row.outcome, r.REASON_HEADER: row.reason, **cut}
    return {
        "stage": STAGE, "source_topic": parameters.input_topic, "source_partition": int(row.input_partition),
        "source_offset": int(row.input_offset), "key": key, "value": value, "reason": row.reason,
        "error_class": row.outcome, "source_timestamp": int(row.ingested_at), "headers": headers,
    }  # fmt: skip


def encode_dead_letters(
    chunks: Iterator[pd.DataFrame], codec: RecordCodec, parameters: EnrichParameters
) -> Iterator[pd.DataFrame]:
    """``mapInPandas``: rejected rows → sink rows on ``parameters.dlq_topic`` (values encoded a chunk at a time)."""
    for chunk in chunks:
        keys, records, positions = [], [], []
        for row in chunk.itertuples(index=False):
            partition, offset = int(row.input_partition), int(row.input_offset)
            raw_key = None if row.key is None or len(row.key) > DEAD_LETTER_KEY_BYTES else bytes(row.key)
            keys.append(dlq_key(raw_key, parameters.input_topic, partition, offset, parameters.partitions))
            records.append(dead_letter_record(row, parameters))
            positions.append((partition, offset))
        values = encode_records(codec, "dead_letter", records)
        out = [
            (parameters.dlq_topic, key, value, None, partition, offset, 0, record["headers"])
            for key, value, (partition, offset), record in zip(keys, values, positions, records, strict=True)
        ]
        yield pd.DataFrame(out, columns=_SINK_COLUMNS).astype(_SINK_TYPES)

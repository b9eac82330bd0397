"""No input may stop the enrich job: arbitrary records through the per-record path, each yields one output.

Hypothesis feeds ``classify`` (parse, validation, event-time gate) arbitrary bytes, arbitrary JSON
documents and the raw payment shape with fields replaced by hostile text: lone surrogates, control
characters, trailing newlines, digits of other scripts, huge numbers, nested values, and card
numbers in every field (as text, as JSON numbers, split by spaces or dashes, inside other text).
Each record must come out as exactly one event or one dead letter, never as an exception; the
classified rows must survive the Arrow conversion Spark applies to them; every dead letter encodes
(Avro, UTF-8 headers), and its reason quotes no card number (13 to 19 digits passing the Luhn check,
``tests.ikkai.contract.card_number_checks``): no bad-input reason holds one at all, and no reason holds one
that the input held (PCI DSS: a stored PAN is unreadable). The Spark test sends the same kind of records
through the job's own batch function (transforms, as-of join, encoding) and checks what the sink would write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ikkai.contract.codec import default_codec
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.dedupe import DEFAULT_LATENESS_MS, EventTimeGate
from spark_jobs.enrich.job import TRANSFORMS_SPEC, EnrichBatch
from spark_jobs.enrich.parse import CHANNELS, RAW_FIELDS, STATUSES
from spark_jobs.enrich.records import (
    CLASSIFIED_COLUMNS,
    CLASSIFIED_SCHEMA,
    EVENT,
    PARSED_COLUMNS,
    EnrichParameters,
    classify,
    encode_dead_letters,
)
from tests.ikkai.contract.card_number_checks import card_numbers_in, with_check_digit
from tests.spark_jobs.enrich.test_parse import INGESTED, PARTITIONS, VALID
from transforms import CURRENCY_EXPONENTS, load_spec

SETTINGS = EnrichParameters("ingest.payments", "events.payments", "dlq.enrich", PARTITIONS, DEFAULT_LATENESS_MS,
                    CURRENCY_EXPONENTS)  # fmt: skip
INGEST_SCHEMA = "partition int, offset long, ingested_at long, key binary, value binary"
_ARROW = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "binary": pa.binary(), "boolean": pa.bool_()}
CLASSIFIED_ARROW = pa.schema([(name, _ARROW[kind]) for name, kind in CLASSIFIED_COLUMNS])
_EVENT_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,3})?(Z|\+00:00)")
_DOMAINS = {"country": r"[A-Z]{2}", "merchant_category_code": r"[0-9]{4}", "card_number": r"[0-9]{12,19}",
            "amount": r"[0-9]+(\.[0-9]+)?", "currency": r"[A-Z]{3}"}  # fmt: skip
_ZEROS = (0x0660, 0x06F0, 0x0966, 0x09E6, 0xFF10, 0x1D7CE)  # Arabic-Indic, Persian, Devanagari, Bengali, fullwidth, …
PURE = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
SPARK = settings(max_examples=15, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip

hostile_char = st.one_of(
    st.characters(codec=None, exclude_categories=()),  # anything, control characters included
    st.characters(categories=["Cs"]),  # lone surrogates: a JSON escape can name one, no UTF-8 can hold one
    st.characters(categories=["Nd"]),  # the digits of every script
    st.sampled_from(["\n", "\r", "\x00", "\t", " ", "\x85", "\u2028", "\ufeff", "\\", '"']),
)
hostile_text = st.lists(hostile_char, max_size=30).map("".join)  # st.text() would drop the surrogates
# A card number wherever a sender might put one: 13-19 digits that pass the Luhn check, the same split by
# spaces or dashes, inside other text, or a JSON number where a string belongs (int and float).
pan_digits = st.integers(10**11, 10**18 - 1).map(lambda body: with_check_digit(str(body)))
pan_text = st.one_of(
    pan_digits,
    pan_digits.map(lambda pan: " ".join(pan[i : i + 4] for i in range(0, len(pan), 4))),
    pan_digits.map(lambda pan: "-".join(pan[i : i + 4] for i in range(0, len(pan), 4))),
    st.builds(lambda before, pan, after: before + pan + after, hostile_text, pan_digits, hostile_text),
)
card_like = st.one_of(pan_text, st.integers(10**11, 10**19 - 1), st.integers(10**11, 10**19 - 1).map(float))


def _digits_of(text: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if "0" <= c <= "9" else c for c in text)


def mutations(valid: str) -> st.SearchStrategy[str]:
    """``valid`` replaced, wrapped or broken by hostile text, or written with another script's digits."""
    return st.one_of(
        hostile_text,
        st.builds(lambda before, after: before + valid + after, hostile_text, hostile_text),
        st.builds(lambda at, text: valid[:at] + text + valid[at + 1 :], st.integers(0, len(valid)), hostile_text),
        st.sampled_from(_ZEROS).map(lambda zero: _digits_of(valid, zero)),
    )


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), hostile_text),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)
# JSON number and nesting tokens that json.dumps never writes: past the int digit limit, inf, deep arrays.
raw_tokens = st.one_of(
    st.sampled_from([b"1" * 5000, b"1e99999", b"-1e99999", b"NaN", b"-0", b"0." + b"0" * 5000 + b"1"]),
    st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 3000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
)
serializers: tuple[Callable[[Any], bytes], ...] = (
    lambda doc: json.dumps(doc).encode(),  # surrogates as \\udXXX escapes: valid UTF-8, valid JSON
    lambda doc: json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass"),  # surrogates as bytes
)


@st.composite
def shaped_documents(draw: st.DrawFn) -> dict[str, Any]:
    """The raw payment shape with up to three fields replaced, and maybe extra (ignored) fields."""
    n = draw(st.integers(0, 10**6))
    document: dict[str, Any] = {**VALID, "event_id": f"evt-{n}", "payment_id": f"pay-{n}"}
    for field in draw(st.lists(st.sampled_from(RAW_FIELDS), max_size=3, unique=True)):
        text = mutations(str(document[field]))
        document[field] = draw(st.one_of(text, text, text, json_values, card_like))  # mostly text: past type checks
    if draw(st.booleans()):
        document.update(draw(st.dictionaries(hostile_text | pan_text, json_values | card_like, max_size=2)))
    return document


@st.composite
def raw_records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None, int]:
    """(key, value, partition) of one ingest record: a shaped document, any JSON, a raw token, or any bytes."""
    kind = draw(st.sampled_from(["shaped", "shaped", "shaped", "json", "token", "bytes"]))
    key: bytes | None
    value: bytes | None
    if kind == "bytes":
        key, value = draw(st.none() | st.binary(max_size=20)), draw(st.none() | st.binary(max_size=300))
    elif kind == "token":
        template = json.dumps({**VALID, "amount": "@"}).encode()
        key, value = b"pay-1", template.replace(b'"@"', draw(raw_tokens))
    else:
        document = draw(shaped_documents() if kind == "shaped" else json_values)
        value = draw(st.sampled_from(serializers))(document)
        payment_id = document.get("payment_id") if isinstance(document, dict) else None
        if isinstance(payment_id, str):
            key = payment_id.encode("utf-8", "surrogatepass")
        else:
            key = draw(st.none() | st.binary(max_size=20))
    partition = kafka_partition(key, PARTITIONS) if key else draw(st.integers(0, PARTITIONS - 1))
    return key, value, partition


def ingest_rows(records: list[tuple[bytes | None, bytes | None, int]]) -> pd.DataFrame:
    """The source's columns for ``records``, offsets counted per partition in list order."""
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    rows = []
    for key, value, partition in records:
        rows.append((partition, offsets[partition], INGESTED, key, value))
        offsets[partition] += 1
    return pd.DataFrame(rows, columns=["partition", "offset", "ingested_at", "key", "value"])


def classify_each(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """``classify`` per input partition, each with a fresh gate (the job's first batch)."""
    return [classify(part, EventTimeGate(SETTINGS.lateness_ms), SETTINGS) for _, part in rows.groupby("partition")]


def check_dead_letter(value: bytes, headers: dict[str, str], raw: dict[tuple[int, int], bytes | None]) -> None:
    letter = default_codec().decode("dead_letter", value)
    assert letter["error_class"] in r.ERROR_CLASSES and letter["reason"]
    assert letter["value"] == raw[(letter["source_partition"], letter["source_offset"])]
    assert headers == {r.STAGE_HEADER: "enrich", r.ERROR_CLASS_HEADER: letter["error_class"],
                       r.REASON_HEADER: letter["reason"]}  # fmt: skip
    for text in (*headers, *headers.values()):
        text.encode("utf-8")  # Kafka headers go out as UTF-8: a lone surrogate would raise here
    check_no_card_number(letter["error_class"], letter["reason"], letter["value"])


def check_no_card_number(error_class: str, reason: str, raw_value: bytes | None) -> None:
    """A reason quotes no card number: a bad-input reason none at all, no reason one of the input's."""
    if error_class in r.BAD_INPUT_CLASSES:
        assert not card_numbers_in(reason), reason
    quoted = card_numbers_in((raw_value or b"").decode("utf-8", "replace"))
    assert not quoted & card_numbers_in(reason), reason


def check_admitted(row: Any, raw_value: bytes) -> None:
    """An event's fields are exactly what the documented raw format allows, and all of it is Unicode text."""
    for name, kind in PARSED_COLUMNS:
        if kind == "string":
            getattr(row, name).encode("utf-8")
    assert row.status in STATUSES and row.channel in CHANNELS
    for name, pattern in _DOMAINS.items():
        assert re.fullmatch(pattern, getattr(row, name)), (name, getattr(row, name))
    assert _EVENT_TIME.fullmatch(json.loads(raw_value)["event_time"])


@PURE
@given(st.lists(raw_records(), min_size=1, max_size=15))
def test_every_record_becomes_one_event_or_one_dead_letter(
    records: list[tuple[bytes | None, bytes | None, int]],
) -> None:
    rows = ingest_rows(records)
    raw = {(int(p), int(o)): v for p, o, v in zip(rows.partition, rows.offset, rows.value, strict=True)}
    seen = []
    for classified in classify_each(rows):
        seen += zip(classified.input_partition, classified.input_offset, strict=True)
        pa.Table.from_pandas(classified, schema=CLASSIFIED_ARROW, preserve_index=False)  # what Spark does with it
        rejected = classified[classified.outcome != EVENT]
        (sink,) = encode_dead_letters(iter([rejected]), default_codec(), SETTINGS)
        assert len(sink) == len(rejected)
        for letter in sink.itertuples(index=False):
            check_dead_letter(letter.value, letter.headers, raw)
        for event in classified[classified.outcome == EVENT].itertuples(index=False):
            raw_value = raw[(event.input_partition, event.input_offset)]
            assert raw_value is not None
            check_admitted(event, raw_value)
    assert sorted(seen) == sorted(raw)  # one output per input: nothing lost, nothing twice


class _NoMasterData:
    """Stands in for the master-data topics: nothing published yet (every event gets the defaults)."""

    def snapshot(self, spark: Any) -> dict[str, pd.DataFrame]:
        return {"merchants": pd.DataFrame(), "customers": pd.DataFrame()}


class _CollectingWriter:
    """Stands in for the Kafka sink: keeps the rows the batch would write."""

    rows: list[Any]

    def __call__(self, rows: Any, batch_id: int) -> None:
        self.rows = rows.collect()


@pytest.fixture(scope="module")
def pipeline() -> Any:
    return load_spec(TRANSFORMS_SPEC)


@SPARK
@given(records=st.lists(raw_records(), min_size=20, max_size=100))
def test_a_spark_batch_of_hostile_records_is_written_whole(
    spark: Any, pipeline: Any, records: list[tuple[bytes | None, bytes | None, int]]
) -> None:
    """The job's batch function over Spark: classify's Arrow round trip, transforms, join, encoding."""
    rows = ingest_rows(records)
    raw = {(int(p), int(o)): v for p, o, v in zip(rows.partition, rows.offset, rows.value, strict=True)}
    settings_, lateness = SETTINGS, SETTINGS.lateness_ms
    classified = (
        spark.createDataFrame(rows, INGEST_SCHEMA)
        .groupBy("partition")
        .applyInPandas(lambda part: classify(part, EventTimeGate(lateness), settings_), CLASSIFIED_SCHEMA)
    )
    writer = _CollectingWriter()
    EnrichBatch(SETTINGS, _NoMasterData(), pipeline, writer)(classified, 0)  # type: ignore[arg-type]
    assert sorted((row.input_partition, row.input_offset) for row in writer.rows) == sorted(raw)
    codec = default_codec()
    for row in writer.rows:
        if row.topic == SETTINGS.events_topic:
            event = codec.decode("payment_event", row.value)
            assert row.key == event["payment_id"].encode() and row.headers is None
            assert re.fullmatch(r"\*{8,15}[0-9]{4}", event["card_masked"]), event["card_masked"]
            assert event["amount_minor"] > 0
        else:
            assert row.topic == SETTINGS.dlq_topic
            check_dead_letter(row.value, row.headers, raw)

"""The enrich job's per-record steps without Spark: the mixed stream decided as the generator expects,
whatever the batch boundaries; dead-letter keys; the last guards before an event is written."""

from __future__ import annotations

import contextlib
import hashlib
import random
import signal
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from demo.raw_payments import MixedStream, mixed_stream
from ikkai.contract.codec import SchemaVersion, default_codec
from ikkai.contract.partitioning import kafka_partition
from ikkai.errors import ConfigError
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich import records as enrich_records
from spark_jobs.enrich.asof import join_as_of
from spark_jobs.enrich.dedupe import EventTimeGate
from spark_jobs.enrich.records import (
    EVENT,
    EVENT_SCHEMA,
    EnrichParameters,
    classify,
    dead_letter_record,
    dlq_key,
    encode_dead_letters,
    encode_events,
    event_record,
)
from spark_jobs.sink.dead_letters import DEAD_LETTER_KEY_BYTES, DEAD_LETTER_VALUE_BYTES
from transforms import CURRENCY_EXPONENTS

INGESTED = 1_790_000_000_000  # the ingest records' Kafka timestamp (2026-09), after every event time


def settings(stream: MixedStream) -> EnrichParameters:
    return EnrichParameters("ingest.payments", "events.payments", "dlq.enrich", stream.partitions, stream.lateness_ms,
                    CURRENCY_EXPONENTS)  # fmt: skip


def run_in_batches(stream: MixedStream, rng: random.Random | None) -> dict[tuple[int, int], str]:
    """Every line through ``classify`` per partition, cut into random batches, the gate's state through JSON."""
    outcomes: dict[tuple[int, int], str] = {}
    for partition in range(stream.partitions):
        lines = [line for line in stream.lines if line.partition == partition]
        rows = pd.DataFrame({
            "partition": partition, "offset": range(len(lines)), "ingested_at": INGESTED,
            "key": [line.key for line in lines], "value": [line.value for line in lines],
        })  # fmt: skip
        state = None
        start = 0
        while start < len(rows):
            end = len(rows) if rng is None else start + rng.randint(1, 40)
            gate = EventTimeGate.from_json(state, stream.lateness_ms)
            chunk = rows.iloc[start:end].sample(frac=1, random_state=start)  # arrival order inside a batch is lost
            result = classify(chunk, gate, settings(stream))
            state = gate.to_json()
            outcomes.update({(partition, int(o)): c for o, c in zip(result.input_offset, result.outcome, strict=True)})
            start = end
    return outcomes


def expected(stream: MixedStream) -> dict[tuple[int, int], str]:
    offsets = dict.fromkeys(range(stream.partitions), 0)
    out = {}
    for line in stream.lines:
        out[(line.partition, offsets[line.partition])] = line.expected
        offsets[line.partition] += 1
    return out


@pytest.mark.parametrize("seed", [7, 11])
def test_the_mixed_stream_is_decided_as_expected_whatever_the_batch_boundaries(seed: int) -> None:
    stream = mixed_stream(seed, partitions=2)
    truth = expected(stream)
    assert run_in_batches(stream, None) == truth
    for cut in range(3):
        assert run_in_batches(stream, random.Random(cut)) == truth  # noqa: S311


def test_late_duplicate_and_stale() -> None:
    gate = EventTimeGate(10_000)
    assert gate.decide("e1", "p1", 100_000) is None
    assert gate.decide("e2", "p2", 95_000) is None  # out of order, within the watermark
    assert gate.decide("e1", "p1", 100_000)[0] == r.DUPLICATE  # type: ignore[index]
    assert gate.decide("e3", "p1", 99_000)[0] == r.STALE  # type: ignore[index]
    assert gate.decide("e4", "p1", 100_000)[0] == r.STALE  # type: ignore[index]  # a tie: the first arrival wins
    assert gate.decide("e5", "p1", 101_000) is None  # a newer status
    assert gate.decide("e6", "p3", 90_999)[0] == r.LATE  # type: ignore[index]  # watermark 101000 - 10000
    assert gate.decide("e7", "p3", 91_000) is None


def test_eviction_keeps_the_state_bounded_and_changes_no_decision() -> None:
    gate = EventTimeGate(10_000)
    for i in range(1000):
        gate.decide(f"e{i}", f"p{i}", i * 1000)
    gate.evict()
    assert len(gate.accepted) <= 11 and len(gate.latest) <= 11
    assert gate.decide("e0", "p0", 0)[0] == r.LATE  # type: ignore[index]
    assert gate.decide("e999", "p999", 999_000)[0] == r.DUPLICATE  # type: ignore[index]


@pytest.mark.parametrize("partitions", [1, 2, 5])
def test_dead_letters_land_on_their_source_partition(partitions: int) -> None:
    for offset in range(50):
        for partition in range(partitions):
            key = dlq_key(None, "ingest.payments", partition, offset, partitions)
            assert kafka_partition(key, partitions) == partition
    home = kafka_partition(b"pay-1", partitions)
    assert dlq_key(b"pay-1", "t", home, 0, partitions) == b"pay-1"  # the business key when it fits


@contextlib.contextmanager
def hang_guard(seconds: int = 10) -> Iterator[None]:
    """A call that would loop for ever fails here instead (SIGALRM), so the test can fail, not hang."""

    def stop(_signum: int, _frame: object) -> None:
        raise AssertionError(f"still running after {seconds} s: it loops")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_dead_letter_of_a_partition_the_layout_lacks_is_refused_with_the_procedure_not_searched_for_ever() -> None:
    """issue 27, item 3: ingest.payments grew to 3 partitions under a job pinned at 2. Its records were dead-lettered
    as wrong_partition, and the key search looked for ever for a key Kafka maps to partition 2 of 2."""
    with hang_guard(), pytest.raises(ConfigError, match="--after-query") as refused:
        dlq_key(None, "ingest.payments", 2, 17, 2)
    assert "ingest.payments partition 2" in str(refused.value) and "layout 2 (0..1)" in str(refused.value)


def test_the_dead_letter_key_search_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even inside the layout the search ends: after a bounded number of tries it fails loudly, never loops."""
    monkeypatch.setattr(enrich_records, "kafka_partition", lambda _key, _partitions: 0)  # murmur2 never says 1
    with hang_guard(), pytest.raises(ConfigError, match="report this bug"):
        dlq_key(None, "ingest.payments", 1, 17, 2)


def test_a_record_of_a_partition_the_layout_lacks_stops_the_job_instead_of_becoming_a_dead_letter() -> None:
    """A running job whose input gained a partition: the first record of it stops the task with the procedure."""
    stream = mixed_stream(7, partitions=2)
    line = stream.lines[0]
    rows = pd.DataFrame({"partition": [2], "offset": [0], "ingested_at": [INGESTED], "key": [line.key],
                         "value": [line.value]})  # fmt: skip
    with pytest.raises(ConfigError, match="the input topic has a partition 2, the job's layout 2"):
        classify(rows, EventTimeGate(stream.lateness_ms), settings(stream))


def _row(**changes: object) -> SimpleNamespace:
    base = {
        "event_id": "e", "payment_id": "p", "customer_id": "c", "merchant_id": "m", "amount": "1.00",
        "amount_minor": 100, "currency": "EUR", "country": "DE", "card_present": True, "event_time": 5,
        "channel": "pos", "status": "authorized", "merchant_category_code": "5411", "merchant_category": "Grocery",
        "card_number": "************1111", "merchant_risk_tier": None, "merchant_country": None,
        "merchant_profile_as_of": None, "customer_segment": "premium", "customer_home_country": "DE",
        "customer_profile_as_of": 3, "ingested_at": 9,
    }  # fmt: skip
    return SimpleNamespace(**{**base, **changes})


def test_an_event_without_a_profile_gets_the_documented_defaults() -> None:
    record = event_record(_row())
    assert record["merchant_risk_tier"] == "unknown" and record["merchant_profile_as_of"] is None
    assert record["customer_segment"] == "premium" and record["customer_profile_as_of"] == 3


def test_the_shipped_fields_are_written_as_before() -> None:
    """Every field of the newest payment_event from its column, converted to its type; nulls to the defaults."""
    row = _row(amount_minor=np.int64(100), card_present=np.bool_(True), event_time=np.int64(5),
               merchant_profile_as_of=float("nan"), ingested_at=np.int64(9))  # fmt: skip
    record = event_record(row)
    assert record == {
        "event_id": "e", "payment_id": "p", "customer_id": "c", "merchant_id": "m", "amount_minor": 100,
        "currency": "EUR", "country": "DE", "card_present": True, "event_time": 5, "channel": "pos",
        "status": "authorized", "merchant_category_code": "5411", "merchant_category": "Grocery",
        "card_masked": "************1111", "merchant_risk_tier": "unknown", "merchant_country": "",
        "merchant_profile_as_of": None, "customer_segment": "premium", "customer_home_country": "DE",
        "customer_profile_as_of": 3, "ingested_at": 9,
    }  # fmt: skip
    assert [type(record[f]) for f in ("amount_minor", "card_present", "event_time")] == [int, bool, int]
    default_codec().encode(EVENT_SCHEMA, record)  # fits the schema as it is


def _with_field(field: dict[str, object]) -> SchemaVersion:
    """The newest payment_event plus one field, as a data engineer's next version would be."""
    newest = default_codec().catalog.get(EVENT_SCHEMA)
    schema = {**newest.schema, "fields": [*newest.schema["fields"], field]}
    return SchemaVersion.from_json(EVENT_SCHEMA, newest.version + 1, schema, "test")


def test_a_field_of_a_new_schema_version_is_written_from_its_column() -> None:
    newer = _with_field({"name": "is_weekend", "type": ["null", "boolean"], "default": None})
    assert event_record(_row(is_weekend=np.bool_(True)), newer)["is_weekend"] is True
    assert event_record(_row(is_weekend=None), newer)["is_weekend"] is None
    bucket = _with_field({"name": "amount_bucket", "type": "string", "default": "none"})
    assert event_record(_row(amount_bucket="small"), bucket)["amount_bucket"] == "small"
    assert event_record(_row(amount_bucket=float("nan")), bucket)["amount_bucket"] == "none"  # null: the default


def test_a_field_no_column_provides_names_the_field_and_the_fix() -> None:
    newer = _with_field({"name": "is_weekend", "type": ["null", "boolean"], "default": None})
    problem = r"is_weekend: payment_event v[0-9]+ has this field but the enriched event has no column 'is_weekend'"
    with pytest.raises(ConfigError, match=problem + ": add the transform"):
        event_record(_row(), newer)


def test_a_null_for_a_field_without_a_default_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"event_id: is null and payment_event v[0-9]+ gives it no default"):
        event_record(_row(event_id=None))


def test_an_unmasked_card_number_never_reaches_an_event() -> None:
    with pytest.raises(ConfigError, match="mask_card_number"):
        event_record(_row(card_number="4111111111111111"))


def test_every_outcome_is_an_event_or_a_known_class() -> None:
    assert set(run_in_batches(mixed_stream(3), None).values()) <= {EVENT, *r.ERROR_CLASSES}


def _versions(*rows: tuple[str, int, int, int, str]) -> pd.DataFrame:
    return pd.DataFrame(
        [(i, v, pub, 0, off, tier, "DE") for off, (i, v, pub, _, tier) in enumerate(rows)],
        columns=["p_id", "p_valid_from", "p_published_at", "p_partition", "p_offset", "p_risk_tier", "p_country"],
    )


def test_the_as_of_join_is_bitemporal() -> None:
    merchants = _versions(
        ("m1", 0, 10, 0, "low"),
        ("m1", 50, 20, 0, "medium"),  # in force from 50, published at 20
        ("m1", 40, 500, 0, "late"),  # valid from 40 but published after the events were ingested
        ("m1", 50, 30, 0, "corrected"),  # a correction of the version from 50, published later
        ("m1", 200, 20, 0, "future"),  # not yet in force for the events below
    )
    customers = pd.DataFrame(columns=["p_id", "p_valid_from", "p_published_at", "p_partition", "p_offset",
                                      "p_segment", "p_home_country"])  # fmt: skip
    events = pd.DataFrame({"merchant_id": ["m1", "m1", "m2", "m1"], "customer_id": "c1",
                           "event_time": [45, 60, 60, 60], "ingested_at": [100, 100, 100, 25]})  # fmt: skip
    joined = join_as_of(events, {"merchants": merchants, "customers": customers})
    assert list(joined["merchant_risk_tier"]) == ["low", "corrected", None, "medium"]
    assert [None if pd.isna(v) else v for v in joined["merchant_profile_as_of"]] == [0, 50, None, 50]
    assert joined["customer_segment"].isna().all()


def test_a_dead_letter_of_a_huge_key_and_value_fits_one_producer_request() -> None:
    """Key and value over their limits are copied cut; the headers give both sizes and the value's sha-256."""
    key, value = b"k" * (DEAD_LETTER_KEY_BYTES + 1), b"v" * 1_040_000
    rows = pd.DataFrame({
        "input_partition": [0], "input_offset": [7], "ingested_at": [INGESTED], "key": [key], "value": [value],
        "outcome": [r.KEY_MISMATCH], "reason": ["the key differs from payment_id"],
    })  # fmt: skip
    config = EnrichParameters("ingest.payments", "events.payments", "dlq.enrich", 2, 10_000, CURRENCY_EXPONENTS)
    [out] = list(encode_dead_letters(iter([rows]), default_codec(), config))
    letter = default_codec().decode("dead_letter", out["value"].iat[0])
    assert len(out["value"].iat[0]) + len(out["key"].iat[0]) < 1_000_000
    assert (letter["key"], letter["value"]) == (key[:DEAD_LETTER_KEY_BYTES], value[:DEAD_LETTER_VALUE_BYTES])
    assert out["key"].iat[0] != key  # a cut key does not key the record: <topic>/<partition>/<offset>
    assert letter["headers"][r.KEY_BYTES_HEADER] == str(len(key))
    assert letter["headers"][r.VALUE_BYTES_HEADER] == str(len(value))
    assert letter["headers"][r.VALUE_SHA256_HEADER] == hashlib.sha256(value).hexdigest()
    assert out["headers"].iat[0] == letter["headers"]


def test_a_dead_letter_of_an_ordinary_line_carries_it_whole() -> None:
    rows = pd.DataFrame({
        "input_partition": [0], "input_offset": [7], "ingested_at": [INGESTED], "key": [b"pay-1"],
        "value": [b"v" * DEAD_LETTER_VALUE_BYTES], "outcome": [r.NOT_JSON], "reason": ["not JSON"],
    })  # fmt: skip
    config = EnrichParameters("ingest.payments", "events.payments", "dlq.enrich", 2, 10_000, CURRENCY_EXPONENTS)
    [out] = list(encode_dead_letters(iter([rows]), default_codec(), config))
    letter = default_codec().decode("dead_letter", out["value"].iat[0])
    assert letter["value"] == rows["value"].iat[0] and letter["key"] == b"pay-1"
    assert set(letter["headers"]) == {r.STAGE_HEADER, r.ERROR_CLASS_HEADER, r.REASON_HEADER}


def _enriched_chunk(seed: int, count: int) -> pd.DataFrame:
    """Enriched, transformed rows as ``mapInPandas`` hands them over: numpy columns, profile fields often null."""
    rng = random.Random(seed)  # noqa: S311 - test data

    def maybe(value: object, null: object = None) -> object:
        return null if rng.random() < 0.3 else value

    rows = [{
        "input_partition": rng.randrange(2), "input_offset": i, "ingested_at": 1_790_000_000_000 + i,
        "event_id": f"e{i}", "payment_id": f"pay-{rng.randrange(10**9)}-ü", "customer_id": f"c{rng.randrange(50)}",
        "merchant_id": f"m{rng.randrange(50)}", "amount": "12.34", "amount_minor": rng.randrange(1, 10**8),
        "currency": rng.choice(["EUR", "JPY"]), "country": "DE", "card_present": rng.random() < 0.5,
        "channel": maybe(rng.choice(["web", "app", "pos"])), "status": maybe("authorized", float("nan")),
        "merchant_category_code": maybe("5411"), "merchant_category": maybe("Grocery"),
        "card_number": "*" * rng.randrange(8, 16) + str(rng.randrange(1000, 10000)),
        "event_time": rng.randrange(-(10**6), 2 * 10**12), "merchant_risk_tier": maybe("high"),
        "merchant_country": maybe("FR"), "merchant_profile_as_of": maybe(rng.randrange(10**12), pd.NA),
        "customer_segment": maybe("premium"), "customer_home_country": maybe("DE"),
        "customer_profile_as_of": maybe(rng.randrange(10**12)),
    } for i in range(count)]  # fmt: skip
    chunk = pd.DataFrame(rows)
    return chunk.astype({"input_partition": np.int32, "merchant_profile_as_of": "Int64"})


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_events_encoded_a_chunk_at_a_time_are_the_bytes_of_one_record_at_a_time(seed: int) -> None:
    codec, config = default_codec(), EnrichParameters("ingest.payments", "events.payments", "dlq.enrich", 2, 10_000, {})
    chunk = _enriched_chunk(seed, 300)
    schema = codec.catalog.get(EVENT_SCHEMA)
    [out] = list(encode_events(iter([chunk]), codec, config))
    one_by_one = [codec.encode(EVENT_SCHEMA, event_record(row, schema), version=schema.version)
                  for row in chunk.itertuples(index=False)]  # fmt: skip
    assert list(out["value"]) == one_by_one
    assert list(out["key"]) == [p.encode() for p in chunk["payment_id"]]
    assert list(out["input_offset"]) == list(chunk["input_offset"])
    assert list(out["input_partition"]) == list(chunk["input_partition"])
    assert out["timestamp"].isna().all() and (out["seq"] == 0).all()
    assert out["headers"].tolist() == [None] * len(chunk)  # Spark takes a null map from None only


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({3: {"card_number": "4111111111111111"}, 5: {"amount_minor": None}}, "mask_card_number"),
        ({3: {"amount_minor": None, "card_number": "4111111111111111"}}, "amount_to_minor_units"),
        ({2: {"event_id": None}, 4: {"card_number": "4111"}}, "event_id: is null"),
    ],
)
def test_a_chunk_with_bad_rows_fails_as_its_first_bad_row_fails_alone(
    bad: dict[int, dict[str, object]], problem: str
) -> None:
    codec, config = default_codec(), EnrichParameters("ingest.payments", "events.payments", "dlq.enrich", 2, 10_000, {})
    chunk = _enriched_chunk(9, 8).astype({"amount_minor": object})
    for i, changes in bad.items():
        for column, value in changes.items():
            chunk.at[i, column] = value
    first = chunk.iloc[[min(bad)]].itertuples(index=False)
    with pytest.raises(ConfigError, match=problem) as alone:
        event_record(next(first))
    with pytest.raises(ConfigError) as together:
        list(encode_events(iter([chunk]), codec, config))
    assert str(together.value) == str(alone.value)


def test_dead_letters_encoded_a_chunk_at_a_time_are_the_bytes_of_one_record_at_a_time() -> None:
    stream = mixed_stream(5)
    rows = pd.DataFrame({
        "partition": [line.partition for line in stream.lines], "offset": range(len(stream.lines)),
        "ingested_at": INGESTED, "key": [line.key for line in stream.lines],
        "value": [line.value for line in stream.lines],
    })  # fmt: skip
    classified = classify(rows, EventTimeGate(stream.lateness_ms), settings(stream))
    rejected = classified[classified["outcome"] != EVENT]
    codec = default_codec()
    [out] = list(encode_dead_letters(iter([rejected]), codec, settings(stream)))
    one_by_one = [codec.encode("dead_letter", dead_letter_record(row, settings(stream)))
                  for row in rejected.itertuples(index=False)]  # fmt: skip
    assert len(one_by_one) > 10 and list(out["value"]) == one_by_one

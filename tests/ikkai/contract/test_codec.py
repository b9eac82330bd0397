"""Avro single-object encoding over the repo's schema catalog (pure: no stack, no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ikkai.contract.codec import (
    MARKER,
    SchemaCatalog,
    SchemaError,
    SingleObjectCodec,
    UnknownWriterSchemaError,
    default_codec,
    schema_fingerprint,
)

PAYMENT_V1 = {
    "event_id": "evt-1",
    "payment_id": "pay-1",
    "customer_id": "cust-1",
    "merchant_id": "m-1",
    "amount_minor": 12_345,
    "currency": "EUR",
    "country": "DE",
    "card_present": False,
    "event_time": 1_767_225_600_000,
}


# Every shipped schema file's fingerprint, as records on the topics carry it (the 8 bytes after the marker, in
# hex). Fixed values: a change of how fingerprints are computed must leave every one of them as it is, or records
# written before the change no longer find their writer schema.
CATALOG_FINGERPRINTS = {
    ("commit_marker", 1): "a001fbbd58968dff",
    ("commit_marker", 2): "e41978a92a8ed8f7",
    ("commit_marker", 3): "5e8a5d52f83fc251",
    ("customer_profile", 1): "fcc496e315266215",
    ("dead_letter", 1): "47402f43a9ef0fc8",
    ("fraud_decision", 1): "88041bdd4b39f383",
    ("merchant_profile", 1): "ab3165b29816e9b2",
    ("outbox_receipt", 1): "6f930c58ae82ceda",
    ("outbox_receipt", 2): "329844b28f8294a7",
    ("outbox_receipt", 3): "81c1222c79b5e7f4",
    ("outbox_request", 1): "a7796f4c54cedb41",
    ("outbox_request", 2): "c7c9a54f45b6e1ae",
    ("owner_claim", 1): "65c803959ead1f6b",
    ("payment_event", 1): "cffa1a445a8a2669",
    ("payment_event", 2): "2629874ed8729ba4",
    ("payment_event", 3): "097dc0f4f5470af3",
}


def test_every_schema_in_the_catalog_keeps_its_fingerprint() -> None:
    catalog = default_codec().catalog
    versions = [v for name in catalog.names() for v in catalog.versions(name)]
    assert {(v.name, v.version) for v in versions} == set(CATALOG_FINGERPRINTS)  # a new file adds its value here
    for v in versions:
        expected = CATALOG_FINGERPRINTS[(v.name, v.version)]
        assert v.fingerprint.hex() == expected, v.label
        assert schema_fingerprint(v.schema).hex() == expected, v.label


def test_every_record_starts_with_the_marker_and_its_writer_fingerprint() -> None:
    codec = default_codec()
    data = codec.encode("payment_event", PAYMENT_V1, version=1)
    assert data[:2] == MARKER == b"\xc3\x01"
    assert data[2:10] == codec.catalog.get("payment_event", 1).fingerprint
    assert codec.writer_of(data).label == "payment_event v1"


def test_round_trip_keeps_timestamps_as_epoch_millis() -> None:
    codec = default_codec()
    record = codec.decode("payment_event", codec.encode("payment_event", PAYMENT_V1, version=1), version=1)
    assert record == PAYMENT_V1
    assert isinstance(record["event_time"], int)


def test_a_v1_record_is_read_by_code_that_knows_v2() -> None:
    codec = default_codec()
    assert codec.catalog.get("payment_event").version >= 2  # v2 is a real shipped file
    old = codec.encode("payment_event", PAYMENT_V1, version=1)
    assert codec.decode("payment_event", old, version=2) == {**PAYMENT_V1, "channel": "unknown"}
    latest = codec.decode("payment_event", old)  # and by the newest reader, every added field at its default
    assert {k: latest[k] for k in PAYMENT_V1} == PAYMENT_V1
    assert latest["channel"] == "unknown"


def test_a_v2_record_read_with_v1_drops_the_new_field() -> None:
    codec = default_codec()
    new = codec.encode("payment_event", {**PAYMENT_V1, "channel": "app"})
    assert codec.decode("payment_event", new, version=1) == PAYMENT_V1


def test_encoding_is_deterministic() -> None:
    codec = default_codec()
    assert codec.encode("payment_event", PAYMENT_V1) == codec.encode("payment_event", dict(PAYMENT_V1))


def test_a_record_that_does_not_fit_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match=r"payment_event v\d+"):
        default_codec().encode("payment_event", {**PAYMENT_V1, "amount_minor": "lots"})


def test_bytes_without_the_marker_are_refused() -> None:
    with pytest.raises(SchemaError, match="expected c301"):
        default_codec().decode("payment_event", b'{"payment_id": "pay-1"}')


def test_an_unknown_writer_fingerprint_says_which(tmp_path: Path) -> None:
    data = default_codec().encode("payment_event", PAYMENT_V1)
    only_v1 = SchemaCatalog([default_codec().catalog.get("payment_event", 1)])
    with pytest.raises(UnknownWriterSchemaError) as caught:
        SingleObjectCodec(only_v1).decode("payment_event", data)
    assert caught.value.fingerprint == data[2:10].hex()


def test_catalog_holds_the_shipped_schemas() -> None:
    assert {"payment_event", "fraud_decision", "dead_letter", "outbox_request"} <= set(default_codec().catalog.names())


def test_a_malformed_schema_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "v1.avsc").write_text(json.dumps({"type": "record", "name": "X", "fields": [{"name": "a"}]}))
    with pytest.raises(SchemaError, match=r"broken/v1\.avsc"):
        SchemaCatalog.from_dir(tmp_path)

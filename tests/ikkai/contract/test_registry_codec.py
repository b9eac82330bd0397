"""The Confluent wire format against a real schema registry, and that other tools read what it writes."""

from __future__ import annotations

import json
import pickle
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from ikkai.contract.codec import SchemaCatalog, SchemaError, SingleObjectCodec, default_codec
from ikkai.contract.registry import (
    MAGIC,
    RegistryCodec,
    RegistryError,
    codec_for,
    frame,
    record_name,
    schema_id_of,
)
from stack.ports import free_port
from tests.registry_helpers import running_registry

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
TIMESTAMPS = ("event_time", "ingested_at")
PAYMENTS = SerializationContext("events.payments", MessageField.VALUE)


def catalog() -> SchemaCatalog:
    return default_codec().catalog


def latest_payment() -> dict[str, object]:
    """A payment_event at the catalog's latest version (v1's fields, the rest at their defaults)."""
    codec = default_codec()
    return codec.decode("payment_event", codec.encode("payment_event", PAYMENT_V1, version=1))


# -- pure: framing, naming, secrets, pickling -----------------------------------------------------


def test_frame_is_magic_zero_then_a_big_endian_id() -> None:
    data = frame(258, b"body")
    assert data == b"\x00\x00\x00\x01\x02body"
    assert data[:1] == MAGIC and schema_id_of(data) == 258


def test_bytes_in_another_format_are_refused_with_what_they_start_with() -> None:
    with pytest.raises(SchemaError, match="starts with 7b"):
        schema_id_of(b'{"payment_id": "pay-1"}')
    with pytest.raises(SchemaError, match="starts with nothing"):
        schema_id_of(b"")


def test_subjects_are_topic_named_for_one_topic_schemas_and_record_named_for_the_rest() -> None:
    codec = RegistryCodec(catalog(), {"url": "http://127.0.0.1:1"})
    assert codec.subject_of(catalog().get("payment_event")) == "events.payments-value"
    assert codec.subject_of(catalog().get("fraud_decision")) == "decisions.fraud-value"
    assert codec.subject_of(catalog().get("dead_letter")) == "dev.ikkai.dlq.DeadLetter"
    assert record_name({"name": "a.b.C", "namespace": "x"}) == "a.b.C"
    override = RegistryCodec(catalog(), {"url": "http://127.0.0.1:1"}, subjects={"dead_letter": "dlq.enrich-value"})
    assert override.subject_of(catalog().get("dead_letter")) == "dlq.enrich-value"


def test_repr_masks_secrets_and_pickling_drops_the_client() -> None:
    codec = RegistryCodec(catalog(), {"url": "http://127.0.0.1:1", "basic.auth.user.info": "svc:s3cret"})
    assert "s3cret" not in repr(codec) and "***" in repr(codec)
    codec._registry()  # a live client holds sockets and locks: it must not travel
    copy = pickle.loads(pickle.dumps(codec))  # noqa: S301 - our own bytes
    assert copy._client is None and copy.url == codec.url


def test_single_object_records_still_decode_without_asking_the_registry() -> None:
    # A topic that moves to the registry keeps its older records readable; no registry answers on port 1.
    codec = RegistryCodec(catalog(), {"url": "http://127.0.0.1:1"})
    old = default_codec().encode("payment_event", PAYMENT_V1, version=1)
    assert codec.decode("payment_event", old, version=1) == PAYMENT_V1


def test_an_environment_without_a_registry_keeps_the_single_object_codec() -> None:
    assert isinstance(codec_for(catalog(), None), SingleObjectCodec)
    assert isinstance(codec_for(catalog(), {"url": ""}), SingleObjectCodec)
    chosen = codec_for(catalog(), {"url": "http://127.0.0.1:1"})
    assert isinstance(chosen, RegistryCodec) and chosen.url == "http://127.0.0.1:1"


def test_an_unreachable_registry_is_one_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    codec = RegistryCodec(catalog(), {"url": url, "max.retries": 0})
    with pytest.raises(RegistryError, match=r"register payment_event v1 under events\.payments-value") as caught:
        codec.encode("payment_event", PAYMENT_V1, version=1)
    assert caught.value.url == url and "runs" in str(caught.value)


# -- against the real registry --------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_registry(tmp_path_factory.mktemp("registry")) as started:
        url = started.url()
        assert url is not None
        yield url


@pytest.fixture
def codec(registry: str) -> Iterator[RegistryCodec]:
    made = RegistryCodec(catalog(), {"url": registry})
    yield made
    made.close()


def fresh_client(url: str) -> SchemaRegistryClient:
    """A client with empty caches: every schema it uses comes from the registry, not from its own registration."""
    return SchemaRegistryClient({"url": url})


@pytest.mark.integration
def test_round_trip_through_the_registry(codec: RegistryCodec, registry: str) -> None:
    data = codec.encode("payment_event", PAYMENT_V1, version=1)
    assert data[:1] == MAGIC
    assert codec.decode("payment_event", data, version=1) == PAYMENT_V1
    # Another process, caches empty, finds the writer by id and resolves v1 to the latest version.
    other = RegistryCodec(catalog(), {"url": registry})
    assert other.decode("payment_event", data) == latest_payment()
    assert other.writer_of(data).label == "payment_event v1"


@pytest.mark.integration
def test_register_catalog_gives_each_version_its_own_id_in_order(codec: RegistryCodec, registry: str) -> None:
    ids = codec.register_catalog(["payment_event", "dead_letter"])
    assert len(set(ids["payment_event"])) == len(catalog().versions("payment_event"))
    assert codec.register_catalog(["payment_event"]) == {"payment_event": ids["payment_event"]}, "idempotent"
    client = fresh_client(registry)
    versions = client.get_versions("events.payments-value")
    assert [client.get_version("events.payments-value", v).schema_id for v in versions] == ids["payment_event"]
    assert "dev.ikkai.dlq.DeadLetter" in client.get_subjects()


@pytest.mark.integration
def test_confluent_serializer_records_decode_with_ours(codec: RegistryCodec, registry: str) -> None:
    record = latest_payment()
    schema_str = json.dumps(catalog().get("payment_event").schema)
    theirs = AvroSerializer(fresh_client(registry), schema_str)(record, PAYMENTS)
    assert theirs is not None
    assert RegistryCodec(catalog(), {"url": registry}).decode("payment_event", theirs) == record


@pytest.mark.integration
def test_our_records_decode_with_the_confluent_deserializer(codec: RegistryCodec, registry: str) -> None:
    record = latest_payment()
    decoded = AvroDeserializer(fresh_client(registry))(codec.encode("payment_event", record), PAYMENTS)
    assert isinstance(decoded, dict)
    # Confluent's deserializer turns timestamp-millis into aware datetimes; ours keeps epoch millis.
    for name in TIMESTAMPS:
        assert decoded[name] == datetime.fromtimestamp(int(record[name]) / 1000, tz=UTC)  # type: ignore[call-overload]
    assert {k: v for k, v in decoded.items() if k not in TIMESTAMPS} == {
        k: v for k, v in record.items() if k not in TIMESTAMPS
    }
    assert list(decoded) == list(record), "the registry serves the fields in their written order"


@pytest.mark.integration
def test_a_writer_schema_only_the_registry_knows_resolves_to_ours(registry: str) -> None:
    # Another producer registers a newer payment_event (one more field, with a default) and writes with it.
    newer = json.loads(json.dumps(catalog().get("payment_event").schema))
    newer["fields"].append({"name": "risk_note", "type": "string", "default": ""})
    client = fresh_client(registry)
    client.register_schema("events.payments-value", Schema(json.dumps(newer), "AVRO"))
    theirs = AvroSerializer(client, json.dumps(newer))({**latest_payment(), "risk_note": "manual review"}, PAYMENTS)
    assert theirs is not None

    codec = RegistryCodec(catalog(), {"url": registry})
    assert codec.writer_of(theirs).version == 0, "not a catalog version: fetched from the registry"
    assert codec.decode("payment_event", theirs) == latest_payment()


@pytest.mark.integration
def test_lookup_only_mode_refuses_a_schema_nobody_registered(tmp_path: Path) -> None:
    with running_registry(tmp_path / "empty") as empty:
        url = empty.url()
        assert url is not None
        codec = RegistryCodec(catalog(), {"url": url}, auto_register=False)
        with pytest.raises(RegistryError, match="look up payment_event v1") as caught:
            codec.encode("payment_event", PAYMENT_V1, version=1)
        assert caught.value.status == 404
        RegistryCodec(catalog(), {"url": url}).register_catalog(["payment_event"])
        assert (
            codec.decode("payment_event", codec.encode("payment_event", PAYMENT_V1, version=1), version=1) == PAYMENT_V1
        )


class LosesTheRace:
    """The registry's answer to the loser of two first registrations (Apicurio's 409 "already exists"), then the
    real registry: the winner's registration is there when the loser looks it up."""

    def __init__(self, url: str, winner: Schema, subject: str) -> None:
        self.real = fresh_client(url)
        self.real.register_schema(subject, winner)  # the winner, another task, got there first

    def register_schema(self, subject: str, schema: Schema) -> int:
        raise SchemaRegistryError(409, 409, f"An artifact with ID '{subject}' in group 'null' already exists.")

    def lookup_schema(self, subject: str, schema: Schema) -> object:
        return self.real.lookup_schema(subject, schema)


@pytest.mark.integration
def test_the_loser_of_a_first_registration_race_takes_the_winners_id(registry: str) -> None:
    subject = f"race-{uuid.uuid4().hex[:8]}-value"
    winner = Schema(json.dumps(catalog().get("payment_event", 1).schema), "AVRO")
    loser = RegistryCodec(catalog(), {"url": registry}, subjects={"payment_event": subject})
    loser._client = LosesTheRace(registry, winner, subject)  # type: ignore[assignment]
    data = loser.encode("payment_event", PAYMENT_V1, version=1)
    assert schema_id_of(data) == fresh_client(registry).lookup_schema(subject, winner).schema_id
    # A refusal with nothing behind it stays the registration's refusal, with its status.
    other = RegistryCodec(catalog(), {"url": registry}, subjects={"payment_event": f"{subject}-other"})
    other._client = LosesTheRace(registry, winner, subject)  # type: ignore[assignment]
    with pytest.raises(RegistryError, match="already exists") as caught:
        other.encode("payment_event", PAYMENT_V1, version=1)
    assert caught.value.status == 409


@pytest.mark.integration
def test_writers_registering_one_new_subject_at_once_all_get_its_id(registry: str) -> None:
    """As the tasks of a batch do, each in its own Python worker with its own codec: all at the same moment."""
    for _ in range(5):
        subject = f"race-{uuid.uuid4().hex[:8]}-value"
        start = threading.Barrier(8)

        def encode(_: int, subject: str = subject, start: threading.Barrier = start) -> int:
            codec = RegistryCodec(catalog(), {"url": registry}, subjects={"payment_event": subject})
            codec._registry()  # the client made before the start, so the requests leave together
            start.wait(timeout=30)
            return schema_id_of(codec.encode("payment_event", PAYMENT_V1, version=1))

        with ThreadPoolExecutor(8) as pool:
            ids = set(pool.map(encode, range(8)))
        assert len(ids) == 1

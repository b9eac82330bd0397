"""The Confluent wire format against a schema registry: records that tools beyond ikkai can read.

Every value this codec writes is

    0x00 | 4-byte big-endian schema id | Avro binary body

the framing of Confluent's serializers, which ksqlDB, Flink's ``avro-confluent`` format, kafka-ui,
Debezium and the Connect Avro converters (Confluent's and Apicurio's in Confluent mode) all read:
each asks the registry for schema ``id`` and decodes. The schemas are still the catalog's
(``ikkai/contract/schemas/``): ``RegistryCodec`` registers the catalog version it writes with (or,
with ``auto_register=False``, only looks it up) and caches its id; it decodes by asking the
registry for the writer schema of an id it has not seen, then resolves the record to the catalog
version the caller reads with, exactly as ``SingleObjectCodec`` does. A writer schema the catalog
does not hold (registered by another producer) still decodes, as long as it resolves to the reader.
It also reads the catalog's single-object encoding (``0xC3 0x01``), so a topic can move from one
format to the other without a gap: replays decode what was written before the switch.

Subjects follow Confluent's default (TopicNameStrategy, ``<topic>-value``) for a schema that lives
on one topic, so ksqlDB and kafka-ui find a topic's schema by name; a schema written to several
topics (``dead_letter`` on every ``dlq.*``, ``commit_marker`` on each job's commit topic) is
registered under its full record name (RecordNameStrategy). ``subjects`` overrides either.

The client is confluent-kafka's ``SchemaRegistryClient``, configured with its own keys
(``url``, ``basic.auth.user.info``, ``ssl.ca.location``, ...). It is created on first use, so the
codec pickles (to Spark executors) without it and each process opens its own. Its URL is printed
(errors, repr, schema sources) with any credentials in it redacted (``ikkai.redaction``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from ikkai.contract.codec import (
    MARKER,
    RecordCodec,
    SchemaCatalog,
    SchemaError,
    SchemaVersion,
    SingleObjectCodec,
    is_shipped,
    read_body,
    record_misfit,
    shipped_catalog,
)
from ikkai.contract.topics import (
    DECISIONS_FRAUD,
    EVENTS_PAYMENTS,
    MASTERDATA_CUSTOMERS,
    MASTERDATA_MERCHANTS,
    OUTBOX_RECEIPTS,
    OUTBOX_REQUESTS,
)
from ikkai.errors import IkkaiError
from ikkai.redaction import redact_urls

MAGIC = b"\x00"
WIRE_HEADER_LENGTH = 5  # magic byte + 4-byte schema id
SECRET_KEYS = frozenset({"basic.auth.user.info", "bearer.auth.token", "bearer.auth.client.secret", "ssl.key.password"})

# TopicNameStrategy subjects of the schemas that live on exactly one topic.
TOPIC_SUBJECTS: Mapping[str, str] = {
    "payment_event": f"{EVENTS_PAYMENTS}-value",
    "fraud_decision": f"{DECISIONS_FRAUD}-value",
    "outbox_request": f"{OUTBOX_REQUESTS}-value",
    "outbox_receipt": f"{OUTBOX_RECEIPTS}-value",
    "merchant_profile": f"{MASTERDATA_MERCHANTS}-value",
    "customer_profile": f"{MASTERDATA_CUSTOMERS}-value",
}


class RegistryError(IkkaiError):
    """The schema registry refused a request or could not be reached. Credentials in a URL are redacted,
    in ``url`` and in ``problem`` (a transport error may quote the URL it called)."""

    def __init__(self, url: str, operation: str, problem: str, *, status: int | None = None, fix: str) -> None:
        url, problem = redact_urls(url), redact_urls(problem)
        super().__init__(f"schema registry {url}: {operation}: {problem}", fix=fix)
        self.url = url
        self.operation = operation
        self.problem = problem
        self.status = status


def record_name(schema: Mapping[str, Any]) -> str:
    """The full name of a record schema (namespace.name), as RecordNameStrategy names its subject."""
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def frame(schema_id: int, body: bytes) -> bytes:
    """``body`` behind the Confluent wire-format header for ``schema_id``."""
    if not 0 <= schema_id < 2**31:
        raise SchemaError(f"id {schema_id}", "a Confluent schema id is a non-negative 32-bit int")
    return MAGIC + schema_id.to_bytes(4, "big") + body


def schema_id_of(data: bytes) -> int:
    """The schema id in a Confluent wire-format record's header."""
    if len(data) < WIRE_HEADER_LENGTH or data[:1] != MAGIC:
        raise SchemaError(
            "?",
            f"not in the Confluent wire format (starts with {data[:1].hex() or 'nothing'}, expected 00)",
            fix="read this topic with the codec its writer used",
        )
    return int.from_bytes(data[1:WIRE_HEADER_LENGTH], "big")


class RegistryCodec:
    """``RecordCodec`` over the Confluent wire format and a schema registry, with the catalog's schemas."""

    def __init__(
        self,
        catalog: SchemaCatalog,
        conf: Mapping[str, Any],
        *,
        subjects: Mapping[str, str] | None = None,
        auto_register: bool = True,
    ) -> None:
        if not conf.get("url"):
            raise IkkaiError("schema registry: no url", fix="set url to the registry's base, e.g. http://host:8081")
        self.catalog = catalog
        self._conf = dict(conf)
        self.subjects = {**TOPIC_SUBJECTS, **(subjects or {})}
        self.auto_register = auto_register
        self._client: SchemaRegistryClient | None = None
        self._ids: dict[bytes, int] = {}  # writer fingerprint -> schema id
        self._writers: dict[int, SchemaVersion] = {}  # schema id -> writer schema
        self._single_object = SingleObjectCodec(catalog)

    @property
    def url(self) -> str:
        """The registry's URL as printed: credentials in it redacted (the client reads the config itself)."""
        return redact_urls(str(self._conf["url"]))

    def __repr__(self) -> str:
        shown = {k: ("***" if k in SECRET_KEYS else redact_urls(v) if k == "url" else v) for k, v in self._conf.items()}
        return f"RegistryCodec({shown}, auto_register={self.auto_register})"

    def __getstate__(self) -> dict[str, Any]:
        # No client (sockets, locks); over the shipped catalog, no catalog either: each process loads its own.
        state = {**self.__dict__, "_client": None, "_writers": {}}
        if is_shipped(self.catalog):
            state |= {"catalog": None, "_single_object": None, "_catalog_digest": self.catalog.digest()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.catalog is None:
            self.catalog = shipped_catalog(state.get("_catalog_digest"))
            self._single_object = SingleObjectCodec(self.catalog)
        for fingerprint, schema_id in self._ids.items():  # the writers this codec registered, from its catalog
            writer = self.catalog.by_fingerprint(fingerprint)
            if writer is not None:
                self._writers[schema_id] = writer

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- the RecordCodec face ------------------------------------------------------------------

    def encode(self, name: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
        writer = self.catalog.get(name, version)
        body = io.BytesIO()
        try:
            fastavro.schemaless_writer(body, writer.parsed, dict(record))
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise record_misfit(writer.label, exc) from exc
        return frame(self.schema_id(writer), body.getvalue())

    def decode(self, name: str, data: bytes, *, version: int | None = None) -> dict[str, Any]:
        if data[:2] == MARKER:
            return self._single_object.decode(name, data, version=version)
        return read_body(data[WIRE_HEADER_LENGTH:], self.writer_of(data), self.catalog.get(name, version))

    # -- the registry --------------------------------------------------------------------------

    def subject_of(self, writer: SchemaVersion) -> str:
        return self.subjects.get(writer.name) or record_name(writer.schema)

    def schema_id(self, writer: SchemaVersion) -> int:
        """The registry's id of ``writer``: registered under its subject (or looked up), then cached."""
        cached = self._ids.get(writer.fingerprint)
        if cached is not None:
            return cached
        subject = self.subject_of(writer)
        schema = Schema(json.dumps(writer.schema), "AVRO")
        if self.auto_register:
            schema_id = self._register(writer, subject, schema)
        else:
            schema_id = self._call(
                f"look up {writer.label} under {subject}",
                lambda: self._registry().lookup_schema(subject, schema).schema_id,
                fix=f"register the catalog first (RegistryCodec.register_catalog) or let a writer register {subject}",
            )
        if not isinstance(schema_id, int):
            raise RegistryError(self.url, f"register {writer.label}", f"answered no schema id ({schema_id!r})",
                                fix="check that url names the registry's Confluent-compatible API")  # fmt: skip
        self._ids[writer.fingerprint] = schema_id
        self._writers[schema_id] = writer
        return schema_id

    def _register(self, writer: SchemaVersion, subject: str, schema: Schema) -> Any:
        """Register ``writer`` under ``subject``. Two writers registering a new subject at once (two tasks of one
        batch) race inside some registries: Apicurio answers the loser "artifact … already exists" although the
        schema is there now. So a refused registration is looked up once before it counts as refused."""
        try:
            return self._call(
                f"register {writer.label} under {subject}",
                lambda: self._registry().register_schema(subject, schema),
                fix=f"the registry must accept it under {subject} (compatibility BACKWARD or weaker; "
                "the catalog's versions are backward compatible in order)",
            )
        except RegistryError as refused:
            if refused.status is None:  # the registry did not answer: nothing to look up
                raise
            try:
                found = self._call("look up", lambda: self._registry().lookup_schema(subject, schema), fix="")
            except RegistryError:  # not there after all: the registration's own refusal is the answer
                raise refused from None
            return found.schema_id

    def writer_of(self, data: bytes) -> SchemaVersion:
        """The writer schema of a wire-format record: the catalog's version if it holds it, else the registry's."""
        schema_id = schema_id_of(data)
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._fetch_writer(schema_id)
            self._writers[schema_id] = writer
        return writer

    def register_catalog(self, names: Iterable[str] | None = None) -> dict[str, list[int]]:
        """Register every version of each schema (all by default), oldest first; the ids by schema name."""
        return {
            name: [self.schema_id(version) for version in self.catalog.versions(name)]
            for name in (names if names is not None else self.catalog.names())
        }

    def _fetch_writer(self, schema_id: int) -> SchemaVersion:
        registered = self._call(
            f"get schema id {schema_id}",
            lambda: self._registry().get_schema(schema_id),
            fix="the record names a schema id this registry does not hold: read it against the registry it was "
            "written with",
        )
        if registered.schema_type not in (None, "AVRO"):
            raise SchemaError(f"id {schema_id}", f"is a {registered.schema_type} schema, not Avro")
        try:
            schema = json.loads(registered.schema_str or "")
        except json.JSONDecodeError as exc:
            raise SchemaError(f"id {schema_id}", f"the registry's schema is not JSON: {exc.msg}") from exc
        if isinstance(schema, dict):
            known = self.catalog.by_fingerprint(SchemaVersion.from_json("?", 0, schema, "registry").fingerprint)
            if known is not None:
                return known
        return SchemaVersion.from_json(f"registry id {schema_id}", 0, schema, f"{self.url} schema id {schema_id}")

    def _registry(self) -> SchemaRegistryClient:
        if self._client is None:
            self._client = SchemaRegistryClient(dict(self._conf))
        return self._client

    def _call(self, operation: str, request: Any, *, fix: str) -> Any:
        try:
            return request()
        except SchemaRegistryError as exc:
            raise RegistryError(self.url, operation, exc.error_message, status=exc.http_status_code, fix=fix) from exc
        except Exception as exc:  # transport failures: from whichever httpx the client bundles (httpx2 or httpx)
            raise RegistryError(
                self.url,
                operation,
                f"{type(exc).__name__}: {exc}",
                fix="check that the registry runs and url names its Confluent-compatible API",
            ) from exc


def codec_for(catalog: SchemaCatalog, registry: Mapping[str, Any] | None, *, auto_register: bool = True) -> RecordCodec:
    """The codec an environment chose: the Confluent wire format when it names a registry (client settings
    with at least ``url``), else the catalog's single-object encoding. ``environment_codec``
    (``ikkai.contract.wire_format``) calls it with what the environment says."""
    if registry and registry.get("url"):
        return RegistryCodec(catalog, registry, auto_register=auto_register)
    return SingleObjectCodec(catalog)

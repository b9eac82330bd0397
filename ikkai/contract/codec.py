"""Avro single-object encoding with this package's ``schemas/`` folder as the schema catalog.

Every value ikkai writes to an event, decision, outbox or DLQ topic is

    0xC3 0x01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's
                Parsing Canonical Form | Avro binary body

(the Avro spec's "single object encoding"), so any reader — Python, Spark, the JVM outbox
sink — finds the exact writer schema by fingerprint and resolves the record to the schema
it knows. The catalog is every ``ikkai/contract/schemas/<name>/v<N>.avsc``, shipped inside the
package (so a wheel and the application zip of ``ikkai jobs submit`` carry it); a record written
years ago still decodes as long as its schema file stays in the catalog (files are never edited
once shipped: a change is a new ``v<N+1>.avsc``, checked by ``schema_compatibility``).

``RecordCodec`` is the one interface callers use; ``SingleObjectCodec`` implements it over a
``SchemaCatalog``. A schema-registry-backed codec can implement the same two methods later.

Timestamps (``timestamp-millis``) travel as plain ints of epoch milliseconds in both
directions: the codec strips logical types before handing schemas to fastavro, so a decoded
record never contains a ``datetime`` built from the local clock or time zone.

No pyspark import here: the outbox emitter and plain Python producers use this module.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import fastavro
from fastavro.schema import to_parsing_canonical_form

from ikkai.contract.masking import shown_error
from ikkai.errors import IkkaiError
from ikkai.resources import package_path

MARKER = b"\xc3\x01"
HEADER_LENGTH = len(MARKER) + 8
_VERSION_FILE = re.compile(r"^v([1-9][0-9]*)\.avsc$")


class SchemaError(IkkaiError):
    """A schema file is missing, malformed or incompatible, or a record does not fit its schema."""

    def __init__(self, schema: str, problem: str, *, fix: str | None = None) -> None:
        super().__init__(f"schema {schema}: {problem}", fix=fix)
        self.schema = schema
        self.problem = problem


def record_misfit(label: str, exc: BaseException) -> SchemaError:
    """A record that does not fit the schema ``label``: the encoder's error, its quoted values masked and cut."""
    return SchemaError(label, f"record does not fit the schema: {shown_error(exc)}")


class UnknownWriterSchemaError(SchemaError):
    """A record names a writer schema (by fingerprint) that the catalog does not hold."""

    def __init__(self, schema: str, fingerprint: str) -> None:
        super().__init__(
            schema,
            f"no schema file in the catalog has fingerprint {fingerprint}",
            fix="the record was written with a schema this code does not ship; add that schema's .avsc, never edit one",
        )
        self.fingerprint = fingerprint


def schema_fingerprint(schema: Any) -> bytes:
    """The 8 header bytes naming ``schema``: CRC-64-AVRO of its Parsing Canonical Form, little-endian.

    fastavro computes it (its hex digits are already the little-endian bytes the spec's header carries).
    """
    return bytes.fromhex(fastavro.schema.fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def _without_logical_types(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_logical_types(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    stripped = {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if "fields" in stripped:
        stripped["fields"] = [{**f, "type": _without_logical_types(f["type"])} for f in schema["fields"]]
    return stripped


@dataclass(frozen=True)
class SchemaVersion:
    """One ``schemas/<name>/v<version>.avsc`` file, parsed."""

    name: str
    version: int
    source: str  # the file it came from, for error messages
    schema: dict[str, Any] = field(repr=False)  # the JSON as written
    fingerprint: bytes = field(repr=False)
    parsed: Any = field(repr=False, compare=False)  # what fastavro reads and writes with

    @classmethod
    def from_json(cls, name: str, version: int, schema: dict[str, Any], source: str) -> SchemaVersion:
        try:
            fingerprint = schema_fingerprint(schema)
            parsed = fastavro.parse_schema(_without_logical_types(copy.deepcopy(schema)), named_schemas={})
        except (fastavro.schema.SchemaParseException, fastavro.schema.UnknownType, KeyError, TypeError) as exc:
            raise SchemaError(f"{name} v{version}", f"{source} is not a valid Avro schema: {exc}") from exc
        return cls(name, version, source, schema, fingerprint, parsed)

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"


def load_schema_file(path: Path) -> SchemaVersion:
    match = _VERSION_FILE.match(path.name)
    if match is None:
        raise SchemaError(path.parent.name, f"{path} is not named v<N>.avsc", fix="rename it to v1.avsc, v2.avsc, ...")
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SchemaError(path.parent.name, f"{path} line {exc.lineno}: invalid JSON: {exc.msg}") from exc
    return SchemaVersion.from_json(path.parent.name, int(match.group(1)), schema, str(path))


class SchemaCatalog:
    """Every known schema version, by (name, version) and by fingerprint."""

    def __init__(self, versions: Iterable[SchemaVersion]) -> None:
        self._by_name: dict[str, dict[int, SchemaVersion]] = {}
        self._by_fingerprint: dict[bytes, SchemaVersion] = {}
        for v in versions:
            self._by_name.setdefault(v.name, {})[v.version] = v
            other = self._by_fingerprint.get(v.fingerprint)
            if other is not None and other.name != v.name:
                raise SchemaError(v.label, f"{v.source} has the same canonical form as {other.source}")
            self._by_fingerprint.setdefault(v.fingerprint, v)

    @classmethod
    def from_dir(cls, root: Path) -> SchemaCatalog:
        if not root.is_dir():
            raise SchemaError(
                str(root), "the schema folder does not exist", fix="name a folder of <name>/v<N>.avsc files"
            )
        return cls(load_schema_file(path) for path in sorted(root.glob("*/v*.avsc")))

    def digest(self) -> str:
        """What this catalog holds, in 16 hex digits: equal digests, equal catalogs (names, versions, fingerprints)."""
        entries = sorted((v.name, v.version, v.fingerprint.hex()) for by in self._by_name.values() for v in by.values())
        return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def versions(self, name: str) -> list[SchemaVersion]:
        return [self._by_name[name][v] for v in sorted(self._named(name))]

    def get(self, name: str, version: int | None = None) -> SchemaVersion:
        versions = self._named(name)
        wanted = max(versions) if version is None else version
        if wanted not in versions:
            raise SchemaError(f"{name} v{wanted}", "no such version", fix=f"known: {sorted(versions)}")
        return versions[wanted]

    def by_fingerprint(self, fingerprint: bytes) -> SchemaVersion | None:
        return self._by_fingerprint.get(fingerprint)

    def _named(self, name: str) -> dict[int, SchemaVersion]:
        if name not in self._by_name:
            raise SchemaError(name, "no such schema in the catalog", fix=f"known: {', '.join(self.names())}")
        return self._by_name[name]


class RecordCodec(Protocol):
    """Turns records into self-describing bytes and back; the only serialization interface jobs use."""

    catalog: SchemaCatalog  # the schemas it writes with and resolves to

    def encode(self, name: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
        """``record`` written with schema ``name`` (its latest version unless ``version`` is given)."""
        ...

    def decode(self, name: str, data: bytes, *, version: int | None = None) -> dict[str, Any]:
        """``data`` resolved from its writer schema to schema ``name`` (latest unless ``version``)."""
        ...


class SingleObjectCodec:
    """``RecordCodec`` over Avro single-object encoding and a ``SchemaCatalog``. Picklable (ships to executors)."""

    def __init__(self, catalog: SchemaCatalog) -> None:
        self.catalog = catalog

    def __reduce__(self) -> tuple[Any, ...]:
        # Over the shipped catalog it travels as a name: each process loads that catalog once (default_codec).
        if is_shipped(self.catalog):
            return (shipped_codec, (self.catalog.digest(),))
        return (SingleObjectCodec, (self.catalog,))

    def encode(self, name: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
        writer = self.catalog.get(name, version)
        out = io.BytesIO()
        out.write(MARKER)
        out.write(writer.fingerprint)
        try:
            fastavro.schemaless_writer(out, writer.parsed, dict(record))
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise record_misfit(writer.label, exc) from exc
        return out.getvalue()

    def writer_of(self, data: bytes) -> SchemaVersion:
        """The catalog entry that wrote ``data``."""
        if len(data) < HEADER_LENGTH or data[:2] != MARKER:
            raise SchemaError(
                "?",
                f"not Avro single-object encoded (starts with {data[:2].hex() or 'nothing'}, expected c301)",
                fix="read this topic with the codec its writer used; ikkai topics carry single-object Avro only",
            )
        fingerprint = data[2:HEADER_LENGTH]
        writer = self.catalog.by_fingerprint(fingerprint)
        if writer is None:
            raise UnknownWriterSchemaError("?", fingerprint.hex())
        return writer

    def decode(self, name: str, data: bytes, *, version: int | None = None) -> dict[str, Any]:
        return read_body(data[HEADER_LENGTH:], self.writer_of(data), self.catalog.get(name, version))


def read_body(body: bytes, writer: SchemaVersion, reader: SchemaVersion) -> dict[str, Any]:
    """An Avro record body written with ``writer``, read as ``reader`` (schema resolution when they differ)."""
    stream = io.BytesIO(body)
    try:
        if writer.fingerprint == reader.fingerprint:
            record = fastavro.schemaless_reader(stream, writer.parsed, None)
        else:
            record = fastavro.schemaless_reader(stream, writer.parsed, reader.parsed)
    except (ValueError, TypeError, EOFError, IndexError, KeyError, fastavro.read.SchemaResolutionError) as exc:
        raise SchemaError(
            reader.label, f"cannot read a record written with {writer.label}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(record, dict):
        raise SchemaError(reader.label, "top-level schema is not a record")
    return record


CATALOG_VAR = "IKKAI_SCHEMA_CATALOG"  # another catalog folder in place of the shipped one (a schema in development)


def schemas_dir() -> Path:
    """The catalog folder: ``$IKKAI_SCHEMA_CATALOG``, else ``ikkai/contract/schemas/`` from the checkout, the
    installed wheel or the application zip. Set the variable for every process of a job (Spark executors too)."""
    override = os.environ.get(CATALOG_VAR)
    return Path(override) if override else package_path("ikkai.contract", "schemas")


@lru_cache(maxsize=1)
def _shipped_catalog() -> SchemaCatalog:
    return SchemaCatalog.from_dir(schemas_dir())


def default_codec() -> SingleObjectCodec:
    """The codec over the shipped schema catalog (loaded once per process)."""
    return SingleObjectCodec(_shipped_catalog())


def shipped_catalog(digest: str | None = None) -> SchemaCatalog:
    """The catalog shipped inside the package, loaded once per process; with ``digest``, checked to be that one.

    A codec over the shipped catalog pickles as its digest, not its schemas (Spark ships it with every
    task); the process that unpickles it must hold the same catalog, or a record could be written with
    another schema than the driver chose. A difference is refused, naming both folders' digests."""
    catalog = _shipped_catalog()
    if digest is not None and catalog.digest() != digest:
        raise SchemaError(
            str(schemas_dir()),
            f"this process's schema catalog (digest {catalog.digest()}) is not the one the codec was made with "
            f"(digest {digest})",
            fix=f"run every process of the job with the same catalog: the same ikkai version, and {CATALOG_VAR} "
            "set alike for the driver and the executors (spark.executorEnv) if you use it",
        )
    return catalog


def shipped_codec(digest: str) -> SingleObjectCodec:
    """The codec over the shipped catalog, checked against the digest it was pickled with (``__reduce__``)."""
    return SingleObjectCodec(shipped_catalog(digest))


def is_shipped(catalog: SchemaCatalog) -> bool:
    """Whether ``catalog`` is this process's shipped catalog: then a pickled codec names it instead of carrying it."""
    return _shipped_catalog.cache_info().currsize > 0 and catalog is _shipped_catalog()

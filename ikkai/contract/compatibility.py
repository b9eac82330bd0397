"""Is every ``schemas/<name>/v<N>.avsc`` backward compatible with ``v<N-1>``?

Backward compatible means: code that knows v<N> (the reader) can read every record written
with v<N-1> (the writer), by Avro's schema resolution rules. A pure check over schema JSON:
``reader_problems(reader, writer)`` lists every reason a resolution would fail, with the
path of the field; an empty list means compatible. Logical types ride on their base types.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from ikkai.contract.codec import SchemaCatalog, SchemaError

_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


@dataclass(frozen=True)
class Incompatibility:
    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


class _Names:
    """Named types (records, enums, fixed) seen while walking one schema, by full name."""

    def __init__(self) -> None:
        self.types: dict[str, dict[str, Any]] = {}

    def resolve(self, schema: Any, namespace: str) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            full = schema if "." in schema else f"{namespace}.{schema}" if namespace else schema
            return self.types.get(full, self.types.get(schema, schema))
        if isinstance(schema, dict) and schema.get("type") in ("record", "error", "enum", "fixed"):
            ns = schema.get("namespace", namespace)
            name = schema["name"]
            full = name if "." in name else f"{ns}.{name}" if ns else name
            self.types.setdefault(full, schema)
        return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = schema["type"]
        return (
            kind
            if isinstance(kind, str) and kind in _PRIMITIVES | {"record", "error", "enum", "fixed", "array", "map"}
            else _kind(kind)
        )
    return str(schema)


def _short_name(schema: dict[str, Any]) -> str:
    return str(schema["name"]).rsplit(".", 1)[-1]


class _Checker:
    def __init__(self) -> None:
        self.reader_names = _Names()
        self.writer_names = _Names()
        self.seen: set[tuple[int, int]] = set()

    def check(self, reader: Any, writer: Any, path: str, rns: str = "", wns: str = "") -> list[Incompatibility]:
        reader = self.reader_names.resolve(reader, rns)
        writer = self.writer_names.resolve(writer, wns)
        if isinstance(reader, dict):
            rns = reader.get("namespace", rns)
        if isinstance(writer, dict):
            wns = writer.get("namespace", wns)
        rkind, wkind = _kind(reader), _kind(writer)
        if isinstance(reader, dict) and isinstance(reader.get("type"), (dict, list)):
            return self.check(reader["type"], writer, path, rns, wns)
        if isinstance(writer, dict) and isinstance(writer.get("type"), (dict, list)):
            return self.check(reader, writer["type"], path, rns, wns)
        if wkind == "union":
            return [p for i, branch in enumerate(writer) for p in self.check(reader, branch, f"{path}|{i}", rns, wns)]
        if rkind == "union":
            for branch in reader:
                if not self.check(branch, writer, path, rns, wns):
                    return []
            return [Incompatibility(path, f"writer type {wkind} matches no branch of the reader's union")]
        if wkind in _PRIMITIVES or rkind in _PRIMITIVES:
            if rkind in _PROMOTIONS.get(wkind, {wkind}) and rkind in _PRIMITIVES:
                return []
            return [Incompatibility(path, f"writer type {wkind} cannot be read as {rkind}")]
        if rkind != wkind:
            return [Incompatibility(path, f"writer type {wkind} cannot be read as {rkind}")]
        if rkind in ("record", "error"):
            return self._records(reader, writer, path, rns, wns)
        if rkind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [Incompatibility(path, f"enum symbols {missing} unknown to the reader and it has no default")]
            return []
        if rkind == "fixed":
            if reader["size"] != writer["size"] or _short_name(reader) != _short_name(writer):
                return [Incompatibility(path, "fixed types differ in name or size")]
            return []
        if rkind == "array":
            return self.check(reader["items"], writer["items"], f"{path}[]", rns, wns)
        return self.check(reader["values"], writer["values"], f"{path}{{}}", rns, wns)

    def _records(
        self, reader: dict[str, Any], writer: dict[str, Any], path: str, rns: str, wns: str
    ) -> list[Incompatibility]:
        if (id(reader), id(writer)) in self.seen:  # recursive types: assume compatible on the second visit
            return []
        self.seen.add((id(reader), id(writer)))
        names = {_short_name(writer)}
        if _short_name(reader) not in names and not names & {a.rsplit(".", 1)[-1] for a in reader.get("aliases", [])}:
            return [Incompatibility(path, f"record {writer['name']} was renamed to {reader['name']} without an alias")]
        written = {f["name"]: f for f in writer["fields"]}
        problems: list[Incompatibility] = []
        for f in reader["fields"]:
            source = next((written[n] for n in [f["name"], *f.get("aliases", [])] if n in written), None)
            where = f"{path}.{f['name']}"
            if source is None:
                if "default" not in f:
                    problems.append(Incompatibility(where, "new field has no default, so old records cannot fill it"))
                continue
            problems += self.check(f["type"], source["type"], where, rns, wns)
        return problems


def reader_problems(reader: dict[str, Any], writer: dict[str, Any]) -> list[Incompatibility]:
    """Why ``reader`` cannot read records written with ``writer``; empty when it can."""
    return _Checker().check(reader, writer, _short_name(reader))


def catalog_problems(catalog: SchemaCatalog) -> list[str]:
    """Every place a schema version is not backward compatible with the previous one, or a version is missing."""
    problems: list[str] = []
    for name in catalog.names():
        versions = catalog.versions(name)
        numbers = [v.version for v in versions]
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"{name}: versions {numbers} are not 1..{len(numbers)} without gaps")
        for older, newer in itertools.pairwise(versions):
            problems += [
                f"{newer.source} cannot read {older.label}: {p}" for p in reader_problems(newer.schema, older.schema)
            ]
    return problems


def check_catalog(catalog: SchemaCatalog) -> None:
    """Raise ``SchemaError`` listing every backward-incompatible schema change in ``catalog``."""
    problems = catalog_problems(catalog)
    if problems:
        raise SchemaError(
            "catalog",
            "; ".join(problems),
            fix="never edit a shipped .avsc; add fields with defaults in a new v<N+1>.avsc instead",
        )

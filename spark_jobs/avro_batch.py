"""Many records of one schema at once: the same bytes as ``SingleObjectCodec``, a batch at a time.

``encode_columns`` writes records given column by column (field name → one value per record)
and returns exactly what ``codec.encode`` returns for each record, without a fastavro call and
a ``BytesIO`` per record: every field is encoded for the whole batch in one pass (varints and
doubles with numpy, strings and bytes with their length prefixes, a constant column once), and
each record is one ``bytes.join`` of its fields behind the single-object header. Schemas with
types it does not write column-wise (records inside records, arrays, enums, fixed, unions other
than ``["null", T]``) fall back to ``codec.encode`` per record; so does any codec that is not a
``SingleObjectCodec``.

``decode_values`` decodes many values of one schema. A record whose writer schema has only
fields the reader has too, with the same types, decodes with the writer's schema alone and gets
the reader's defaults for the rest: the same dict as Avro's schema resolution, at half the cost.
Every record that does not decode that way goes through ``codec.decode``, so a bad record fails
with exactly the error the codec gives it.

Avro's binary encoding (the spec's "Binary Encoding"): int and long as zig-zag varints, double
as 8 bytes little-endian, string and bytes as a long length and the bytes, a map as one block
(a long count, the entries, a zero) or a single zero when empty, a union as the long index of
its branch and the value. ``tests/spark_jobs/test_avro_batch.py`` pins the equality with
fastavro's output.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np

from ikkai.contract.codec import MARKER, RecordCodec, SchemaError, SchemaVersion, SingleObjectCodec, record_misfit

__all__ = ["SameKeys", "decode_values", "encode_columns", "encode_records"]

Pieces = list[bytes] | bytes  # one encoded value per record, or one for all of them
_Encoder = Callable[[Any, int], Pieces]  # (column, count) -> pieces


@dataclass(frozen=True)
class SameKeys:
    """A map column whose every record has these keys in this order: key → that key's values, one per record."""

    values: Mapping[str, Sequence[Any]]


class _Unsupported(Exception):
    """The schema has a type this module does not write column-wise: encode record by record."""


# ---------------------------------------------------------------- one value (constants, map entries)


def _zigzag_varint(value: int) -> bytes:
    if not -(1 << 63) <= value < (1 << 63):
        raise OverflowError(f"{value} does not fit a long")
    n = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_zigzag_varint(n) for n in range(128)]  # lengths and counts below 128: one or two bytes


def _length(n: int) -> bytes:
    return _SMALL[n] if n < 128 else _zigzag_varint(n)


def _integer(value: Any) -> int:
    if isinstance(value, bool | int | np.integer):
        return int(value)
    raise TypeError(f"{value!r} is not an integer")


def _text(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    data = value.encode()
    return _length(len(data)) + data


def _blob(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"{value!r} is not bytes")
    data = bytes(value)
    return _length(len(data)) + data


def _scalar_writer(kind: str) -> Callable[[Any], bytes]:
    """The encoder of one value of a primitive type."""
    if kind == "null":
        return _null
    if kind == "boolean":
        return lambda v: b"\x01" if v else b"\x00"
    if kind in ("int", "long"):
        return lambda v: _zigzag_varint(_integer(v))
    if kind == "double":
        return lambda v: np.array([_real(v)], dtype="<f8").tobytes()
    if kind == "float":
        return lambda v: np.array([_real(v)], dtype="<f4").tobytes()
    if kind == "string":
        return _text
    if kind == "bytes":
        return _blob
    raise _Unsupported(kind)


def _null(value: Any) -> bytes:
    if value is not None:
        raise TypeError(f"{value!r} is not null")
    return b""


def _real(value: Any) -> float:
    if isinstance(value, bool | int | float | np.integer | np.floating):
        return float(value)
    raise TypeError(f"{value!r} is not a number")


# ---------------------------------------------------------------- whole columns


def _is_column(value: Any) -> bool:
    return isinstance(value, list | tuple | np.ndarray | SameKeys)


def _varints(values: Any) -> list[bytes]:
    """Zig-zag varints of a whole column of longs, with numpy: seven bits at a time for every value at once."""
    array = np.asarray(values)
    if array.dtype.kind not in "iub" and len(array):
        raise TypeError(f"a long column holds {array.dtype} values")
    longs = array.astype(np.int64)
    if array.dtype.kind == "u" and len(array) and int(array.max()) >= 1 << 63:
        raise OverflowError("a value does not fit a long")
    rest = ((longs << 1) ^ (longs >> 63)).view(np.uint64)
    groups = np.zeros((len(longs), 10), dtype=np.uint8)
    lengths = np.ones(len(longs), dtype=np.int64)
    for i in range(10):
        groups[:, i] = (rest & 0x7F).astype(np.uint8)
        rest = rest >> np.uint64(7)
        more = rest != 0
        if not more.any():
            break
        groups[more, i] |= 0x80
        lengths += more
    raw = groups.tobytes()
    return [raw[10 * i : 10 * i + n] for i, n in enumerate(lengths.tolist())]


def _fixed_width(values: Any, dtype: str, width: int) -> list[bytes]:
    array = np.asarray(values)
    if array.dtype.kind not in "fiub" and len(array):
        raise TypeError(f"a numeric column holds {array.dtype} values")
    raw = array.astype(dtype).tobytes()
    return [raw[i : i + width] for i in range(0, len(raw), width)]


def _column_writer(kind: str) -> Callable[[Any], list[bytes]]:
    """The encoder of a whole column of a primitive type."""
    if kind in ("int", "long"):
        return _varints
    if kind == "double":
        return lambda values: _fixed_width(values, "<f8", 8)
    if kind == "float":
        return lambda values: _fixed_width(values, "<f4", 4)
    if kind == "string":
        return lambda values: [_text(v) for v in values]
    scalar = _scalar_writer(kind)
    return lambda values: [scalar(v) for v in values]


def _primitive(schema: Any) -> str | None:
    """The primitive type name of ``schema`` (``"long"`` or ``{"type": "long"}``), else None."""
    name = schema.get("type") if isinstance(schema, dict) else schema
    primitives = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
    return name if isinstance(name, str) and name in primitives else None


def _encoder(schema: Any) -> _Encoder:
    """(column, count) → pieces, for one field's schema."""
    kind = _primitive(schema)
    if kind is not None:
        scalar, column = _scalar_writer(kind), _column_writer(kind)
        return lambda values, count: column(values) if _is_column(values) else scalar(values)
    if isinstance(schema, list):
        return _union_encoder(schema)
    if isinstance(schema, dict) and schema.get("type") == "map":
        return _map_encoder(schema["values"])
    raise _Unsupported(str(schema))


def _union_encoder(branches: list[Any]) -> _Encoder:
    kinds = [_primitive(b) for b in branches]
    if len(branches) != 2 or "null" not in kinds or None in kinds or kinds[0] == kinds[1]:
        raise _Unsupported(str(branches))
    null_index = kinds.index("null")
    other = 1 - null_index
    other_kind = kinds[other]
    assert other_kind is not None
    null_piece, other_tag = _length(null_index), _length(other)
    scalar, column = _scalar_writer(other_kind), _column_writer(other_kind)

    def encode(values: Any, count: int) -> Pieces:
        if not _is_column(values):
            return null_piece if values is None else other_tag + scalar(values)
        present = [i for i, v in enumerate(values) if v is not None]
        pieces: list[bytes] = [null_piece] * len(values)
        for i, piece in zip(present, column([values[i] for i in present]), strict=True):
            pieces[i] = other_tag + piece
        return pieces

    return encode


def _map_encoder(values_schema: Any) -> _Encoder:
    kind = _primitive(values_schema)
    if kind is None:
        raise _Unsupported(str(values_schema))
    scalar, column = _scalar_writer(kind), _column_writer(kind)

    def one(entries: Any) -> bytes:
        if not isinstance(entries, Mapping):
            raise TypeError(f"{entries!r} is not a map")
        if not entries:
            return b"\x00"
        parts = [_zigzag_varint(len(entries))]
        for key, value in entries.items():
            parts += (_text(key), scalar(value))
        parts.append(b"\x00")
        return b"".join(parts)

    def encode(values: Any, count: int) -> Pieces:
        if isinstance(values, SameKeys):
            if not values.values:
                return b"\x00"
            head = _zigzag_varint(len(values.values))
            columns: list[Any] = []
            for key, entries in values.values.items():
                if len(entries) != count:
                    raise ValueError(f"map key {key!r} has {len(entries)} values for {count} records")
                columns += (itertools.repeat(_text(key), count), column(entries))
            return [head + b"".join(entry) + b"\x00" for entry in zip(*columns, strict=False)]
        if _is_column(values):
            return [one(v) for v in values]
        return one(values)

    return encode


@dataclass(frozen=True)
class _RecordEncoder:
    header: bytes
    fields: tuple[tuple[str, Any, _Encoder], ...]  # name, default, encoder


def _record_encoder(writer: SchemaVersion) -> _RecordEncoder:
    schema = writer.parsed
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise _Unsupported(writer.label)
    fields = tuple((f["name"], f.get("default"), _encoder(f["type"])) for f in schema["fields"])
    return _RecordEncoder(MARKER + writer.fingerprint, fields)


_record_encoders: dict[bytes, _RecordEncoder | None] = {}


def _cached_record_encoder(writer: SchemaVersion) -> _RecordEncoder | None:
    if writer.fingerprint not in _record_encoders:
        try:
            _record_encoders[writer.fingerprint] = _record_encoder(writer)
        except _Unsupported:
            _record_encoders[writer.fingerprint] = None
    return _record_encoders[writer.fingerprint]


def encode_columns(
    codec: RecordCodec, name: str, columns: Mapping[str, Any], count: int, *, version: int | None = None
) -> list[bytes]:
    """``count`` records of schema ``name``, given by field: a list, tuple or array of ``count`` values, one value
    for every record, or ``SameKeys`` for a map. A missing field takes its default, like ``codec.encode``.
    """
    if count == 0:
        return []
    writer = codec.catalog.get(name, version) if isinstance(codec, SingleObjectCodec) else None
    encoder = None if writer is None else _cached_record_encoder(writer)
    if writer is None or encoder is None:
        return [codec.encode(name, record, version=version) for record in _records(columns, count)]
    pieces: list[Pieces] = [encoder.header]
    try:
        for field, default, encode in encoder.fields:
            piece = encode(columns.get(field, default), count)
            if isinstance(piece, list) and len(piece) != count:
                raise ValueError(f"field {field} has {len(piece)} values for {count} records")
            if isinstance(piece, bytes) and isinstance(pieces[-1], bytes):
                pieces[-1] += piece  # neighbouring constants: one piece
            else:
                pieces.append(piece)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise record_misfit(writer.label, exc) from exc
    rows = [itertools.repeat(p, count) if isinstance(p, bytes) else p for p in pieces]
    return [b"".join(parts) for parts in zip(*rows, strict=False)]


def encode_records(
    codec: RecordCodec, name: str, records: Sequence[Mapping[str, Any]], *, version: int | None = None
) -> list[bytes]:
    """``codec.encode`` of each record, column by column (records of one schema, the same fields each)."""
    if not records:
        return []
    names = list(dict.fromkeys(key for record in records for key in record))
    if any(len(record) != len(names) for record in records):  # a record lacks a field: defaults per record
        return [codec.encode(name, record, version=version) for record in records]
    columns = {key: [record[key] for record in records] for key in names}
    return encode_columns(codec, name, columns, len(records), version=version)


def _records(columns: Mapping[str, Any], count: int) -> Iterable[dict[str, Any]]:
    expanded: dict[str, Any] = {}
    for key, values in columns.items():
        if isinstance(values, SameKeys):
            keys = list(values.values)
            expanded[key] = [dict(zip(keys, row, strict=True)) for row in zip(*values.values.values(), strict=True)]
        else:
            expanded[key] = values if _is_column(values) else [values] * count
    for i in range(count):
        yield {key: values[i] for key, values in expanded.items()}


# ---------------------------------------------------------------- decoding


@dataclass(frozen=True)
class _Shortcut:
    """Reading ``writer``'s records with its own schema gives the resolved record once ``defaults`` are added."""

    writer: SchemaVersion
    order: tuple[str, ...]  # the reader's fields, in its order
    defaults: Mapping[str, Any]  # the reader's fields the writer lacks, with their (immutable) defaults
    appended: bool = False  # the reader's order is the writer's fields, then the defaults: ``update`` keeps it


def _simple(schema: Any) -> Any:
    """A primitive, a union of primitives or a map of primitives, in a comparable form; else None."""
    if isinstance(schema, list):
        branches = [_primitive(branch) for branch in schema]
        return None if None in branches else tuple(branches)
    kind = _primitive(schema)
    if kind is not None:
        return kind
    if isinstance(schema, dict) and schema.get("type") == "map" and _primitive(schema["values"]) is not None:
        return ("map", _primitive(schema["values"]))
    return None


def _shortcut(writer: SchemaVersion, reader: SchemaVersion) -> _Shortcut | None:
    """When resolving ``writer``'s records to ``reader`` changes nothing but adding defaults; else None.

    That is: every writer field is a reader field of the same simple type (no named, nested or
    promoted types, no aliases), so the writer's own reading is the resolved reading of those
    fields, and every other reader field has an immutable default.
    """
    w, r = writer.parsed, reader.parsed
    if not (isinstance(w, dict) and isinstance(r, dict) and w.get("type") == r.get("type") == "record"):
        return None
    reader_fields = {f["name"]: f for f in r["fields"]}
    writer_names = set()
    for field in w["fields"]:
        other = reader_fields.get(field["name"])
        if other is None or _simple(field["type"]) is None or _simple(field["type"]) != _simple(other["type"]):
            return None
        writer_names.add(field["name"])
    defaults: dict[str, Any] = {}
    for name, field in reader_fields.items():
        if field.get("aliases"):
            return None
        if name not in writer_names:
            if "default" not in field or not isinstance(field["default"], str | int | float | bool | None):
                return None
            defaults[name] = field["default"]
    order = tuple(reader_fields)
    appended = tuple(f["name"] for f in w["fields"]) + tuple(defaults) == order
    return _Shortcut(writer, order, defaults, appended)


_shortcuts: dict[tuple[bytes, bytes], _Shortcut | None] = {}


def decode_values(codec: RecordCodec, name: str, values: Sequence[bytes | None]) -> list[dict[str, Any] | SchemaError]:
    """``codec.decode(name, value)`` of each value (the latest version of ``name``), or the SchemaError it raises.

    A null value (a Kafka tombstone) is not a record of any schema: TypeError, as ``bytes(None)`` is.
    The reader and each writer's shortcut are looked up once per call, not once per record.
    """
    if not isinstance(codec, SingleObjectCodec):
        return [_by_codec(codec, name, _value(value)) for value in values]
    catalog, reader = codec.catalog, codec.catalog.get(name)
    plans: dict[bytes, _Shortcut | None] = {}  # writer fingerprint -> its shortcut (None: the codec decodes)
    out: list[dict[str, Any] | SchemaError] = []
    append, reader_fingerprint, header, marker = out.append, reader.fingerprint, _HEADER, MARKER
    for value in values:
        if value is None:
            raise TypeError("a Kafka record without a value (null) cannot be decoded")
        fingerprint = value[2:header]
        plan = plans.get(fingerprint, _UNSEEN)
        if plan is _UNSEEN:
            plan = None
            if value[:2] == marker and len(value) >= header:
                writer = catalog.by_fingerprint(fingerprint)
                if writer is not None:
                    key = (writer.fingerprint, reader_fingerprint)
                    if key not in _shortcuts:
                        _shortcuts[key] = _shortcut(writer, reader)
                    plan = _shortcuts[key]
            plans[fingerprint] = plan
        record = _by_shortcut(plan, value) if plan is not None and value[:2] == marker else None
        append(_by_codec(codec, name, value) if record is None else record)
    return out


_UNSEEN: Any = object()


def _by_shortcut(plan: _Shortcut, value: bytes) -> dict[str, Any] | None:
    """The record read with the writer's schema alone, the reader's defaults added; None: let the codec decode it."""
    try:
        record = fastavro.schemaless_reader(io.BytesIO(value[_HEADER:]), plan.writer.parsed, None)
    except Exception:  # noqa: BLE001 - the codec gives this record its own error
        return None
    if not isinstance(record, dict):
        return None
    if not plan.defaults:
        return record
    if plan.appended:
        record.update(plan.defaults)
        return record
    return {f: record[f] if f in record else plan.defaults[f] for f in plan.order}


def _by_codec(codec: RecordCodec, name: str, value: bytes) -> dict[str, Any] | SchemaError:
    try:
        return codec.decode(name, value)
    except SchemaError as exc:
        return exc


def _value(value: bytes | None) -> bytes:
    if value is None:
        raise TypeError("a Kafka record without a value (null) cannot be decoded")
    return value


_HEADER = len(MARKER) + 8

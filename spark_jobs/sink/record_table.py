"""A partition's output records as one Arrow table: how a write task hands them to the executor's writer.

A write task's rows are Arrow already (``mapInArrow``). Rather than a Python tuple per record
(``record.Record``), pickled to the executor writer and unpickled there, the task keeps them in
columns (``record_table``: the sink's seven fields under fixed names and types, ``RECORD_SCHEMA``),
sizes them and checks them against their topics' limits vectorized (``table_sizes``, ``fits``),
cuts them into transactions on arrays (``size_bounds.transaction_starts``) and sends each as Arrow
IPC frames (``ipc_frames``); the writer reads them back without a pickle (``read_frames``) and makes
the tuples ``write_partition`` produces from in one pass over the columns (``table_records``).
The rare record too large for its topic takes the tuples' way in the task (its dead letter,
``size_bounds.set_aside_too_large``), and its table is made again from them (``table_of``).

Every function is pure; pyarrow and numpy are imported where they are used (the driver imports none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ikkai.errors import ConfigError
from spark_jobs.sink.record import HEADERS, Record
from spark_jobs.sink.size_bounds import RECORD_FRAMING_BYTES, SizedSink, packed_starts, record_limit

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

# A Record's fields as columns, in its order (record.TOPIC ... record.SOURCE_OFFSET).
RECORD_COLUMNS = ("topic", "key", "value", "timestamp", "headers", "source_partition", "source_offset")
HEADER_FRAMING_BYTES = 10  # per header, as record_bytes counts it


def record_schema() -> pa.Schema:
    """The Arrow schema of ``RECORD_COLUMNS``: what a task sends and the writer reads."""
    import pyarrow as pa

    return pa.schema([
        ("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("timestamp", pa.int64()),
        ("headers", pa.map_(pa.string(), pa.string())), ("source_partition", pa.int64()), ("source_offset", pa.int64()),
    ])  # fmt: skip


def record_table(rows: pa.Table, headers: str, source_columns: tuple[str, str]) -> pa.Table:
    """The sink's output ``rows`` (its columns ``topic``, ``key``, ``value``, ``timestamp``, optionally ``headers``,
    and the source columns) as ``RECORD_SCHEMA``, in their order; refused if a row does not name its input record."""
    import pyarrow as pa

    source_partition, source_offset = source_columns
    if rows.column(source_partition).null_count or rows.column(source_offset).null_count:
        raise ConfigError(
            "sink", f"{source_partition}/{source_offset}", "a row does not name its input record",
            fix="every output row carries the partition and offset of the input record it came from",
        )  # fmt: skip
    schema = record_schema()
    columns = [
        rows.column("topic"), rows.column("key"), rows.column("value"), rows.column("timestamp"),
        rows.column(headers) if headers in rows.schema.names else pa.nulls(len(rows), schema.field("headers").type),
        rows.column(source_partition), rows.column(source_offset),
    ]  # fmt: skip
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def table_of(records: Sequence[Record]) -> pa.Table:
    """``records`` (tuples) as ``RECORD_SCHEMA``: headers as pairs, in their order."""
    import pyarrow as pa

    fields = list(zip(*records, strict=True)) if records else [()] * len(RECORD_COLUMNS)
    headers = [None if h is None else [tuple(p) for p in (h.items() if isinstance(h, Mapping) else h)]
               for h in fields[HEADERS]]  # fmt: skip
    arrays = [*fields[:HEADERS], headers, *fields[HEADERS + 1 :]]
    schema = record_schema()
    return pa.Table.from_arrays([pa.array(a, f.type) for a, f in zip(arrays, schema, strict=True)], schema=schema)


def table_records(table: pa.Table) -> list[Record]:
    """The records of ``table`` as tuples (``record.Record``), in its order: one pass per column."""
    none = [None] * len(table) if table.column("headers").null_count == len(table) else None  # no headers at all
    columns: list[list[Any]] = [
        none if name == "headers" and none is not None else table.column(name).to_pylist() for name in RECORD_COLUMNS
    ]
    return list(zip(*columns, strict=True))


def table_sizes(table: pa.Table) -> np.ndarray:
    """``size_bounds.record_bytes`` of each record of ``table``, vectorized (int64)."""
    import numpy as np

    sizes: np.ndarray = _lengths(table.column("key")) + _lengths(table.column("value")) + RECORD_FRAMING_BYTES
    headers = table.column("headers")
    if headers.null_count < len(table):
        sizes += np.concatenate([_header_bytes(chunk) for chunk in headers.chunks]) if headers.num_chunks else 0
    return sizes


def _header_bytes(headers: pa.MapArray) -> np.ndarray:
    """Per row, its headers' bytes as ``record_bytes`` counts them: name and value (UTF-8) and ``HEADER_FRAMING_BYTES``
    each; a null map, none. ``headers.offsets`` index its keys and items as a whole, however it was sliced."""
    import numpy as np

    each = _lengths(headers.keys) + _lengths(headers.items) + HEADER_FRAMING_BYTES
    running = np.concatenate([[0], np.cumsum(each)])
    offsets = headers.offsets.to_numpy()
    per_row: np.ndarray = running[offsets[1:]] - running[offsets[:-1]]
    if headers.null_count:
        per_row[headers.is_null().to_numpy(zero_copy_only=False)] = 0
    return per_row


def _lengths(column: Any) -> np.ndarray:
    """The bytes of each binary or string of ``column`` (a null: 0), as int64."""
    import numpy as np
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    lengths: np.ndarray = pc.binary_length(column).fill_null(0).to_numpy().astype(np.int64)
    return lengths


def fits(config: SizedSink, table: pa.Table, sizes: np.ndarray) -> bool:
    """Every record of ``table`` is within its topic's ``record_limit``: nothing for ``set_aside_too_large`` to do."""
    import pyarrow.compute as pc

    topics = table.column("topic")
    for topic in pc.unique(topics).to_pylist():
        over = sizes > record_limit(config, topic)
        if over.any() and over[pc.equal(topics, topic).to_numpy(zero_copy_only=False)].any():
            return False
    return True


def ipc_frames(table: pa.Table, sizes: np.ndarray, max_bytes: int) -> list[pa.Buffer]:
    """``table`` cut between records into frames of at most ``max_bytes`` of ``sizes``, each an Arrow IPC stream.

    A frame's bytes are less than its records' ``record_bytes``: each record's ``RECORD_FRAMING_BYTES``
    is far more than its few offsets and bits in Arrow's columns, and the frame's schema fits in
    ``size_bounds.FRAME_SLACK_BYTES``.
    """
    import pyarrow as pa

    starts = packed_starts(sizes, max_bytes)
    frames = []
    for start, stop in zip(starts, [*starts[1:], len(table)][: len(starts)], strict=True):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table.slice(start, stop - start))
        frames.append(sink.getvalue())
    return frames


def read_frames(frames: Sequence[bytes | pa.Buffer]) -> pa.Table:
    """The table of ``ipc_frames``'s frames, in their order; ``RECORD_SCHEMA`` or refused."""
    import pyarrow as pa

    schema = record_schema()
    tables = [pa.ipc.open_stream(frame).read_all() for frame in frames]
    for table in tables:
        if not table.schema.equals(schema):
            raise TypeError(f"a frame of records with the schema {table.schema}, not the sink's {schema}")
    return pa.concat_tables(tables) if tables else schema.empty_table()

"""Decoding payment events for the decision step: one lookup per record against one per call, side by side.

    python -m benchmarks.avro_decode [--events 20000] [--rounds 7]

The values are payment events in all three schema versions (v1 and v2 get the reader's defaults),
as infer reads them. Old: ``avro_batch.decode_values`` as it was, every record looking up the
reader, its writer and the shortcut, and adding the defaults in a new dict. New: those looked up
once per writer per call, the defaults added in place when the reader's order allows. Rounds
alternate; the table gives µs per event (median round) and the ratio. Also measured and not
kept: the values of one writer concatenated as one Avro array and read in one fastavro call
(``--array``), which was no faster: fastavro's cost is the record, not the call.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import fastavro

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import MARKER, RecordCodec, SchemaError, SingleObjectCodec, default_codec
from spark_jobs import avro_batch
from spark_jobs.avro_batch import decode_values

_HEADER = len(MARKER) + 8


def _decoded_one_by_one(codec: RecordCodec, name: str, values: Sequence[bytes]) -> list[Any]:
    """``decode_values`` as it was: each record looks its writer, the reader and the shortcut up."""
    out: list[Any] = []
    for value in values:
        record: Any = None
        if isinstance(codec, SingleObjectCodec) and value[:2] == MARKER and len(value) >= _HEADER:
            writer = codec.catalog.by_fingerprint(value[2:_HEADER])
            if writer is not None:
                reader = codec.catalog.get(name)
                key = (writer.fingerprint, reader.fingerprint)
                if key not in avro_batch._shortcuts:
                    avro_batch._shortcuts[key] = avro_batch._shortcut(writer, reader)
                shortcut = avro_batch._shortcuts[key]
                if shortcut is not None:
                    try:
                        record = fastavro.schemaless_reader(io.BytesIO(value[_HEADER:]), shortcut.writer.parsed, None)
                    except Exception:  # noqa: BLE001 - the codec below gives this record its own error
                        record = None
                    if isinstance(record, dict) and shortcut.defaults:
                        record = {f: record[f] if f in record else shortcut.defaults[f] for f in shortcut.order}
        if isinstance(record, dict):
            out.append(record)
            continue
        try:
            out.append(codec.decode(name, value))
        except SchemaError as exc:
            out.append(exc)
    return out


def _as_one_array(codec: RecordCodec, name: str, values: Sequence[bytes]) -> list[Any]:
    """The tried alternative (latest-version values only): the bodies as one Avro array, one fastavro call."""
    writer = codec.catalog.get(name)
    schema = fastavro.parse_schema({"type": "array", "items": writer.parsed})
    count = io.BytesIO()
    fastavro.schemaless_writer(count, {"type": "long"}, len(values))
    body = b"".join([count.getvalue(), *(v[_HEADER:] for v in values), b"\x00"])
    return list(fastavro.schemaless_reader(io.BytesIO(body), schema, None))  # type: ignore[arg-type]


def _per_event_us(step: Callable[[], Any], events: int) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) / events * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--array", action="store_true", help="also time the one-array alternative (v3 values)")
    args = parser.parse_args()
    codec = default_codec()
    records = payment_records(simulate(5, payments=args.events).payments)
    values = [codec.encode("payment_event", r, version=1 + i % 3) for i, r in enumerate(records)]
    latest = [codec.encode("payment_event", r) for r in records]
    assert decode_values(codec, "payment_event", values) == _decoded_one_by_one(codec, "payment_event", values)
    rows: dict[str, list[float]] = {"one lookup per record (old)": [], "one lookup per call (new)": []}
    if args.array:
        rows |= {"v3: one fastavro call per record": [], "v3: one array, one call (tried)": []}
    for _ in range(args.rounds):
        rows["one lookup per record (old)"].append(
            _per_event_us(lambda: _decoded_one_by_one(codec, "payment_event", values), len(values))
        )
        rows["one lookup per call (new)"].append(
            _per_event_us(lambda: decode_values(codec, "payment_event", values), len(values))
        )
        if args.array:
            rows["v3: one fastavro call per record"].append(
                _per_event_us(lambda: decode_values(codec, "payment_event", latest), len(latest))
            )
            rows["v3: one array, one call (tried)"].append(
                _per_event_us(lambda: _as_one_array(codec, "payment_event", latest), len(latest))
            )
    medians = {name: statistics.median(times) for name, times in rows.items()}
    print(f"decoding payment events, {len(values)} a call, {args.rounds} alternating rounds (median)")
    print(f"{'path':<36}{'µs/event':>10}")
    for name, median in medians.items():
        print(f"{name:<36}{median:>10.2f}")
    old, new = medians["one lookup per record (old)"], medians["one lookup per call (new)"]
    print(f"{'new / old':<36}{new / old:>10.2f}")
    if args.array:
        tried = medians["v3: one array, one call (tried)"] / medians["v3: one fastavro call per record"]
        print(f"{'array / per record (v3)':<36}{tried:>10.2f}")


if __name__ == "__main__":
    main()

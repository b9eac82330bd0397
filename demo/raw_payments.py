"""A seeded mixed stream of raw payment lines for ``ingest.payments``, with the expected outcomes.

The format itself (fields, types, meaning) is defined where it is parsed: ``spark_jobs.enrich.parse``.

``mixed_stream(seed)`` builds such a stream from ``payments_simulation.simulate``: valid events,
exact duplicates (the same bytes again), status updates, out-of-order events within the
watermark, stale status updates, events later than the watermark and at least one line of
every bad-input class of ``enrich.reasons``. Every line comes with where a producer puts it
(partition) and what the enrich job must make of it (``expected``: ``"event"`` or the DLQ
``error_class``), so tests, the demo and the benchmarks share one truth.

Expectations for ``late``/``duplicate``/``stale`` follow the enrich job's rule (per input
partition, in offset order; watermark = max valid event_time seen so far − lateness); the
generator keeps every valid event at least a second away from its watermark, so the outcome
never hangs on a boundary. Lines a file connector cannot land as described (no key, a key
that differs from the body, the wrong partition, invalid UTF-8, an empty line) have
``via_connector=False``; ``connector_lines()`` leaves them out.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from demo.client_logs import KAFKA_LOG
from demo.payments_simulation import DAY_MS, START_MS, PaymentsWorld, simulate
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.dedupe import DEFAULT_LATENESS_MS

EVENT = "event"
MCCS = ("5411", "5812", "5999", "4111", "7011", "5732", "5311", "4814")
# Decimals per currency, as the source system formats amounts (the enrich job validates against
# transforms.CURRENCY_EXPONENTS; this is the sender's side).
_SOURCE_EXPONENTS = {"EUR": 2, "USD": 2, "GBP": 2, "JPY": 0}


@dataclass(frozen=True)
class RawLine:
    """One ingest record: key and value bytes, its partition, and what the enrich job must do with it."""

    key: bytes | None
    value: bytes
    partition: int
    expected: str  # EVENT, or the dlq.enrich error_class
    event_id: str | None  # the event's id when the line is a well-formed event
    via_connector: bool  # a FileStreamSource + JsonFieldToKey can land it exactly like this


@dataclass(frozen=True)
class MixedStream:
    lines: tuple[RawLine, ...]
    world: PaymentsWorld
    partitions: int
    lateness_ms: int
    seed: int

    def expected_event_ids(self) -> list[str]:
        """Event ids that must appear once each in events.payments (stream order)."""
        return [line.event_id for line in self.lines if line.expected == EVENT and line.event_id is not None]

    def outcomes(self) -> Counter[str]:
        return Counter(line.expected for line in self.lines)

    def connector_lines(self) -> list[RawLine]:
        return [line for line in self.lines if line.via_connector]


def format_event_time(ms: int) -> str:
    """Epoch millis as the raw format's ISO-8601 UTC string with milliseconds."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_amount(minor: int, currency: str) -> str:
    exponent = _SOURCE_EXPONENTS[currency]
    if exponent == 0:
        return str(minor)
    return f"{minor // 10**exponent}.{minor % 10**exponent:0{exponent}d}"


def encode_line(document: Mapping[str, Any]) -> bytes:
    """One line of the raw format: compact JSON, UTF-8, no newline inside."""
    return json.dumps(dict(document), separators=(",", ":"), ensure_ascii=False).encode()


def card_number(customer_id: str) -> str:
    """A deterministic 16-digit test PAN for a customer, with a valid Luhn check digit."""
    digits = "4" + f"{abs(hash_text(customer_id)) % 10**14:014d}"
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return digits + str((10 - total % 10) % 10)


def hash_text(text: str) -> int:
    """A stable (not per-process salted) small hash of ``text``."""
    value = 0
    for byte in text.encode():
        value = (value * 131 + byte) % (1 << 61)
    return value


def merchant_mcc(merchant_id: str) -> str:
    return MCCS[hash_text(merchant_id) % len(MCCS)]


def raw_payment(
    payment: Mapping[str, Any], *, event_id: str, status: str, event_time_ms: int, channel: str
) -> dict[str, Any]:
    """A raw-format document for one simulated payment (``payments_simulation`` row)."""
    currency = str(payment["currency"])
    return {
        "event_id": event_id,
        "payment_id": str(payment["payment_id"]),
        "customer_id": str(payment["customer_id"]),
        "merchant_id": str(payment["merchant_id"]),
        "amount": format_amount(int(payment["amount_minor"]), currency),
        "currency": currency,
        "country": str(payment["country"]),
        "card_present": bool(payment["card_present"]),
        "channel": channel,
        "card_number": card_number(str(payment["customer_id"])),
        "merchant_category_code": merchant_mcc(str(payment["merchant_id"])),
        "status": status,
        "event_time": format_event_time(event_time_ms),
    }


@dataclass
class _Draft:
    key: bytes | None
    value: bytes
    expected: str | None  # None: a well-formed event, decided by the event-time pass
    event_id: str | None = None
    payment_id: str | None = None
    event_time_ms: int | None = None
    partition: int | None = None  # forced (wrong_partition); else from the key
    via_connector: bool = True


def _bad_lines(template: dict[str, Any], partitions: int) -> list[_Draft]:
    """One line per bad-input class, each with exactly one defect, built from a valid document."""
    pid = template["payment_id"]
    key = pid.encode()

    def changed(**fields: Any) -> bytes:
        return encode_line({**template, **fields})

    def without(name: str) -> bytes:
        return encode_line({k: v for k, v in template.items() if k != name})

    drafts = [
        _Draft(None, b"", r.EMPTY_VALUE, via_connector=False),
        _Draft(key, changed(merchant_id="m-BAD").replace(b"m-BAD", b"m-\xff\xfe"), r.INVALID_UTF8, via_connector=False),
        _Draft(None, b'{"payment_id": "' + key + b'", "amount": 12.3', r.NOT_JSON),
        _Draft(None, b"payment," + key + b",12.30,EUR", r.NOT_JSON),
        _Draft(None, json.dumps([template]).encode(), r.NOT_AN_OBJECT),  # a JSON array
        _Draft(key, without("currency"), r.MISSING_FIELD),
        _Draft(key, changed(event_time=None), r.MISSING_FIELD),
        _Draft(key, changed(amount=12.34), r.WRONG_TYPE),
        _Draft(key, changed(card_present="yes"), r.WRONG_TYPE),
        _Draft(key, changed(amount="12,34"), r.BAD_AMOUNT),
        _Draft(key, changed(amount="1e3"), r.BAD_AMOUNT),
        _Draft(key, changed(amount="-5.00"), r.NON_POSITIVE_AMOUNT),
        _Draft(key, changed(amount="0.00"), r.NON_POSITIVE_AMOUNT),
        _Draft(key, changed(amount="250000000.00", currency="EUR"), r.ABSURD_AMOUNT),
        _Draft(key, changed(currency="XYZ"), r.UNKNOWN_CURRENCY),
        _Draft(key, changed(amount="12.345", currency="EUR"), r.TOO_MANY_DECIMALS),
        _Draft(key, changed(amount="1500.5", currency="JPY"), r.TOO_MANY_DECIMALS),
        _Draft(key, changed(event_time="yesterday at noon"), r.BAD_TIMESTAMP),
        _Draft(key, changed(event_time="2026-13-45T25:61:00.000Z"), r.BAD_TIMESTAMP),
        _Draft(key, changed(event_time="2099-01-01T00:00:00.000Z"), r.FUTURE_TIMESTAMP),
        _Draft(key, changed(status="exploded"), r.INVALID_FIELD),
        _Draft(key, changed(merchant_category_code="shop"), r.INVALID_FIELD),
        _Draft(b"", changed(payment_id=""), r.MISSING_KEY),
        _Draft(None, changed(), r.MISSING_KEY, via_connector=False),
        _Draft(b"pay-someone-else", changed(), r.KEY_MISMATCH, via_connector=False),
    ]
    if partitions > 1:
        wrong = (kafka_partition(key, partitions) + 1) % partitions
        drafts.append(_Draft(key, changed(), r.WRONG_PARTITION, partition=wrong, via_connector=False))
    return drafts


def _assign_event_time_outcomes(drafts: list[_Draft], partitions: int, lateness_ms: int) -> list[RawLine]:
    """The enrich job's event-time rule, applied in stream order per partition (the expected truth)."""
    max_seen: dict[int, int] = {}
    accepted_ids: dict[int, dict[str, int]] = {}
    latest: dict[int, dict[str, int]] = {}
    lines: list[RawLine] = []
    for i, d in enumerate(drafts):
        if d.partition is not None:
            partition = d.partition
        elif d.key:
            partition = kafka_partition(d.key, partitions)
        else:
            partition = i % partitions
        expected = d.expected
        if expected is None:
            assert d.event_time_ms is not None and d.event_id is not None and d.payment_id is not None
            t = d.event_time_ms
            top = max_seen.get(partition)
            watermark = None if top is None else top - lateness_ms
            if watermark is not None and abs(t - watermark) < 1_000:
                raise ValueError(f"generator: event {d.event_id} is within 1 s of its watermark; change the seed")
            ids = accepted_ids.setdefault(partition, {})
            if watermark is not None and t < watermark:
                expected = r.LATE
            elif d.event_id in ids:
                expected = r.DUPLICATE
            elif latest.setdefault(partition, {}).get(d.payment_id, t - 1) >= t:
                expected = r.STALE
            else:
                expected = EVENT
                ids[d.event_id] = t
                latest[partition][d.payment_id] = t
            max_seen[partition] = t if top is None else max(top, t)
        lines.append(RawLine(d.key, d.value, partition, expected, d.event_id, d.via_connector))
    return lines


def mixed_stream(
    seed: int = 7,
    *,
    payments: int = 300,
    partitions: int = 2,
    lateness_ms: int = DEFAULT_LATENESS_MS,
    start_ms: int = START_MS + DAY_MS,
    step_ms: int = 2_000,
    bad_rounds: int = 1,
) -> MixedStream:
    """A seeded raw stream (see the module docstring); ``bad_rounds`` copies of every bad-input class."""
    world = simulate(seed, payments=payments)
    rng = random.Random(seed)  # noqa: S311 - test data, not cryptography
    drafts: list[_Draft] = []

    def event(doc: dict[str, Any]) -> _Draft:
        t = int(datetime.strptime(doc["event_time"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000)
        return _Draft(doc["payment_id"].encode(), encode_line(doc), None, doc["event_id"], doc["payment_id"], t)

    rows = world.payments.to_dict("records")
    late = 0
    for i, payment in enumerate(rows):
        now = start_ms + i * step_ms + rng.randrange(0, 400)
        behind = rng.choice((0, 0, 0, 0, 3_000, 5_000))  # out of order, within the watermark
        channel = "pos" if payment["card_present"] else rng.choice(("web", "app"))
        first = raw_payment(payment, event_id=str(payment["event_id"]), status="authorized",
                            event_time_ms=now - behind, channel=channel)  # fmt: skip
        capture = {**first, "event_id": f"{payment['event_id']}.captured", "status": "captured",
                   "event_time": format_event_time(now - behind + 1_500)}  # fmt: skip
        roll = rng.random()
        if roll < 0.05:  # captured arrives first: the authorization that follows is stale
            drafts += [event(capture), event(first)]
        elif roll < 0.15:  # a status update
            drafts += [event(first), event(capture)]
        elif roll < 0.23:  # a retried request: the same bytes twice
            drafts += [event(first), event(first)]
        else:
            drafts.append(event(first))
        if i >= 30 and rng.random() < 0.04:  # an event from ten minutes ago: beyond any watermark
            late += 1
            old = {**first, "event_id": f"evt-{seed}-late-{late}", "payment_id": f"pay-{seed}-late-{late}",
                   "event_time": format_event_time(now - lateness_ms - 600_000)}  # fmt: skip
            drafts.append(event(old))
    template = raw_payment(rows[0], event_id=f"evt-{seed}-bad", status="authorized", event_time_ms=start_ms,
                           channel="web")  # fmt: skip
    for round_ in range(bad_rounds):
        for bad in _bad_lines({**template, "payment_id": f"pay-{seed}-bad-{round_}"}, partitions):
            drafts.insert(rng.randrange(10, len(drafts)), bad)
    lines = _assign_event_time_outcomes(drafts, partitions, lateness_ms)
    stream = MixedStream(tuple(lines), world, partitions, lateness_ms, seed)
    missing = set(r.ERROR_CLASSES) - set(stream.outcomes()) - ({r.WRONG_PARTITION} if partitions == 1 else set())
    if missing:
        raise ValueError(
            f"generator: seed {seed} with {payments} payments yields no {sorted(missing)}; use more payments"
        )
    return stream


def write_jsonl(path: Path, lines: Iterable[RawLine]) -> int:
    """Append the lines a file connector can land to ``path`` (one per line); returns how many."""
    count = 0
    with path.open("ab") as out:
        for line in lines:
            if line.via_connector:
                out.write(line.value + b"\n")
                count += 1
    return count


def produce_lines(cluster: KafkaContext, topic: str, lines: Iterable[RawLine]) -> int:
    """Every line to ``topic`` on its own partition, in stream order.

    An idempotent producer writes them (docs/architecture.md, rule 3).
    """
    from confluent_kafka import Producer

    producer = Producer(cluster.producer_config(**{"linger.ms": 5, "logger": KAFKA_LOG}))
    count = 0
    for line in lines:
        give_up_at = time.monotonic() + 60
        while True:
            try:
                producer.produce(topic, value=line.value, key=line.key, partition=line.partition)
                break
            except BufferError:  # the local queue is full (100,000 lines): wait for acknowledgements, then go on
                if time.monotonic() > give_up_at:
                    raise TimeoutError(f"{topic}: the producer's queue stayed full for 60 s") from None
                producer.poll(0.5)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise TimeoutError(f"{topic}: not every raw line was acknowledged within 60 s")
    return count


def write_master_data(
    cluster: KafkaContext, world: PaymentsWorld, seed: int, *, merchants_topic: str | None = None,
    customers_topic: str | None = None,
) -> int:  # fmt: skip
    """Publish merchant and customer profile versions consistent with ``world`` (see ``master_data``)."""
    from demo.payments_simulation import generate_profiles
    from spark_jobs.enrich.master_data import CUSTOMERS_TOPIC, MERCHANTS_TOPIC, publish_profiles

    merchants, customers = generate_profiles(world, seed)
    return publish_profiles(
        cluster, merchants, customers, merchants_topic=merchants_topic or MERCHANTS_TOPIC,
        customers_topic=customers_topic or CUSTOMERS_TOPIC, logger=KAFKA_LOG,
    )  # fmt: skip

"""Parse and validate one raw ingest record (pure: bytes in, a ``ParsedPayment`` or a ``Rejection`` out).

``parse_record`` checks a record of ``ingest.payments`` against the raw format below and returns
either the fields the enrich pipeline goes on with, or a ``Rejection`` naming one ``error_class`` of
``enrich.reasons`` and a reason a person can act on.
The checks run in a fixed order and the first failure wins, so a record always gets the same
class: bytes (empty, UTF-8, JSON, nesting, Unicode text, object) → fields (present, typed, ids
within their length bound) → key (present, equal to payment_id, on its key's partition) → amount
(plain decimal, > 0, known currency, decimals, size) → time (ISO-8601, not in the future) → domains
(status, channel, country, MCC, card, ids not empty).

No input may stop the job: whatever the bytes, the result is a ``ParsedPayment`` or a
``Rejection``, never an exception, and a ``ParsedPayment`` holds only what the later steps
(event-time gate, transforms, as-of join, Avro and Arrow encoding) handle. Hence: a pattern must
match the whole value (``fullmatch``: ``$`` would also match before a trailing newline) and
digits are ASCII (``[0-9]``, never ``\\d``, which matches every script's digits); JSON that names a
lone surrogate (``"\\ud800"``, valid JSON, but no UTF-8 text can hold it) is ``invalid_utf8``
wherever it sits; nesting is bounded, so no check depends on the depth of Python's stack; and
amounts are compared as digit strings, never converted whole (Python's ``int`` refuses more than
4300 digits).

Sizes are bounded by rule, so that no valid line can make an event the producer refuses. The ids
are the only free text that reaches a ``payment_event`` (every other field is checked against a
domain, the amount becomes a number, extra fields are dropped): each is at most ``MAX_ID_CHARS``
characters (512 bytes of UTF-8 at most), or the record is ``invalid_field`` with a reason that
names the field and its length and quotes no more than ``enrich.reasons.QUOTED_CHARS`` characters
of it. Without the bound, a valid line just under Kafka Connect's 1 MiB became an event over the
producer's ``message.max.bytes``; the sink also sets aside any record too large to produce
(``partition_transactions``), but an event should never get there.

A reason never quotes a card number, whichever field holds it (a card number sent as a JSON number
was once quoted whole as ``wrong_type``): values are quoted only through ``enrich.reasons.quote``,
which masks card-number-like digits to their last four, and instants are written as ISO-8601 text
(``reasons.instant``), never as 13 digits of epoch millis that no reader can tell from a PAN.

Everything depends on the record alone (its key, value, partition and Kafka timestamp), never on
the clock: "the future" is more than ``MAX_CLOCK_SKEW_MS`` after the ingest record's own
timestamp, so a replay a year later judges a record exactly as the first run did.

The format (what the payment source sends, landed byte for byte by the ingestion connector):
one JSON object per line, UTF-8, Kafka key = ``payment_id``. Unknown extra fields are ignored.

================== ======== =============================================================
field              JSON     meaning
================== ======== =============================================================
event_id           string   the source's id of this event; a retried request repeats it (a duplicate);
                            1 to MAX_ID_CHARS characters, like every id
payment_id         string   business key, never empty; also the Kafka record key
customer_id        string   never empty
merchant_id        string   never empty
amount             string   decimal in major units, e.g. "12.34"; at most the currency's decimals
currency           string   ISO 4217 code (EUR, USD, GBP, JPY, ...)
country            string   ISO 3166-1 alpha-2 where the card was used
card_present       boolean
channel            string   web | app | pos
card_number        string   the card's PAN (12-19 digits); masked by the enrich pipeline, never stored
merchant_category_code string  ISO 18245 MCC, four digits
status             string   authorized | captured | refunded (a payment's lifecycle; newer event_time wins)
event_time         string   ISO-8601 UTC with milliseconds, "2026-01-05T10:00:00.123Z"
================== ======== =============================================================
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ikkai.contract.partitioning import kafka_partition
from spark_jobs.enrich import reasons as r

RAW_FIELDS = (
    "event_id", "payment_id", "customer_id", "merchant_id", "amount", "currency", "country", "card_present",
    "channel", "card_number", "merchant_category_code", "status", "event_time",
)  # fmt: skip
STATUSES = ("authorized", "captured", "refunded")
CHANNELS = ("web", "app", "pos")
MAX_CLOCK_SKEW_MS = 3_600_000  # an event may claim to be at most an hour newer than its ingest record
MAX_MINOR_UNITS = 100_000_000  # 1,000,000.00 EUR, 100,000,000 JPY: above this a payment is absurd
MAX_NESTING = 100  # levels of arrays/objects; the raw format is one flat object
MAX_ID_CHARS = 128  # event_id, payment_id, customer_id, merchant_id: the free text that reaches an event
ID_FIELDS = ("event_id", "payment_id", "customer_id", "merchant_id")
STRING_FIELDS = tuple(f for f in RAW_FIELDS if f != "card_present")
# Each is used with fullmatch, and digits are [0-9]: see the module docstring.
_AMOUNT = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?")
_EVENT_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,3}))?(?:Z|\+00:00)"
)
_COUNTRY = re.compile(r"[A-Z]{2}")
_MCC = re.compile(r"[0-9]{4}")
_PAN = re.compile(r"[0-9]{12,19}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class Rejection:
    error_class: str
    reason: str


@dataclass(frozen=True)
class ParsedPayment:
    """A valid raw payment: the raw fields (amount as its decimal text) and event_time in epoch millis."""

    event_id: str
    payment_id: str
    customer_id: str
    merchant_id: str
    amount: str
    currency: str
    country: str
    card_present: bool
    channel: str
    card_number: str
    merchant_category_code: str
    status: str
    event_time: int


def parse_event_time(text: str) -> int | None:
    """``2026-01-05T10:00:00.123Z`` → epoch millis; None if not that shape or not a real instant."""
    match = _EVENT_TIME.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC)
    except ValueError:
        return None
    millis = int((fraction or "0").ljust(3, "0"))
    return int(moment.timestamp()) * 1000 + millis


def _walk(document: Any) -> Iterator[tuple[int, str, Any]]:
    """(depth, top-level field or "", node) for every value and key of ``document``; iterative, not recursive."""
    pending: list[tuple[int, str, Any]] = [(0, "", document)]
    while pending:
        depth, field, node = pending.pop()
        yield depth, field, node
        if isinstance(node, dict):
            for key, item in node.items():
                yield depth + 1, field or key, key
                pending.append((depth + 1, field or key, item))
        elif isinstance(node, list):
            pending.extend((depth + 1, field, item) for item in node)


_SCALARS = frozenset({str, bool, int, float, type(None)})


def _check_text(document: Any, text: str) -> Rejection | None:
    """Nesting within ``MAX_NESTING`` and every string (keys too) Unicode text that UTF-8 can hold.

    The usual record, one flat object whose text has no ``\\u`` escape, passes without a walk: only
    an escape can put a surrogate into a string decoded from valid UTF-8, and a flat object is one
    level deep.
    """
    if "\\u" not in text and type(document) is dict and all(type(v) in _SCALARS for v in document.values()):
        return None
    too_deep = Rejection(r.NOT_JSON, f"the value is not JSON this job reads: nested deeper than {MAX_NESTING} levels")
    for depth, field, node in _walk(document):
        if depth > MAX_NESTING:
            return too_deep
        if isinstance(node, str) and _SURROGATE.search(node):
            where = f" (in field {r.quote(field)})" if field else ""
            return Rejection(
                r.INVALID_UTF8,
                f"the value is JSON but not Unicode text: it escapes a lone surrogate{where}, which no UTF-8 "
                "can hold; the sender must write text, not raw UTF-16 halves",
            )
    return None


def _decode(value: bytes | None) -> Any:
    if value is None or len(value) == 0:
        return Rejection(r.EMPTY_VALUE, "the record has no value")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejection(r.INVALID_UTF8, f"the value is not valid UTF-8: byte {value[exc.start]:#04x} at {exc.start}")
    try:
        document = json.loads(text)
    except RecursionError:  # deeper than the stack allows, so deeper than MAX_NESTING: the same reason
        return Rejection(r.NOT_JSON, f"the value is not JSON this job reads: nested deeper than {MAX_NESTING} levels")
    except ValueError as exc:
        return Rejection(r.NOT_JSON, f"the value is not JSON: {exc}")
    rejection = _check_text(document, text)
    if rejection is not None:
        return rejection
    if not isinstance(document, dict):
        return Rejection(r.NOT_AN_OBJECT, f"the value is JSON but a {type(document).__name__}, not an object")
    return document


def _check_fields(doc: Mapping[str, Any]) -> Rejection | None:
    missing = [f for f in RAW_FIELDS if doc.get(f) is None]
    if missing:
        return Rejection(r.MISSING_FIELD, f"missing or null field(s): {', '.join(missing)}")
    wrong = [f"{f} is {r.quote(doc[f])}, not a string" for f in STRING_FIELDS if not isinstance(doc[f], str)]
    if not isinstance(doc["card_present"], bool):
        wrong.append(f"card_present is {r.quote(doc['card_present'])}, not true/false")
    if wrong:
        return Rejection(r.WRONG_TYPE, "; ".join(wrong))
    too_long = [
        f"{f} is {len(doc[f]):,} characters long, at most {MAX_ID_CHARS} (it starts {r.quote(doc[f])})"
        for f in ID_FIELDS
        if len(doc[f]) > MAX_ID_CHARS
    ]
    if too_long:
        return Rejection(r.INVALID_FIELD, "; ".join(too_long))
    return None


def _check_key(doc: Mapping[str, Any], key: bytes | None, partition: int, partitions: int) -> Rejection | None:
    payment_id = doc["payment_id"]
    if key is None:
        return Rejection(r.MISSING_KEY, f"the record has no Kafka key (payment_id {r.quote(payment_id)})")
    if not payment_id.strip():
        return Rejection(r.MISSING_KEY, "payment_id is empty: the payment has no business key")
    if key != payment_id.encode():
        return Rejection(r.KEY_MISMATCH, f"Kafka key {r.quote(key)} differs from payment_id {r.quote(payment_id)}")
    home = kafka_partition(key, partitions)
    if home != partition:
        return Rejection(
            r.WRONG_PARTITION,
            f"key {r.quote(payment_id)} belongs on partition {home} of {partitions}, it came on {partition}: "
            "the producer did not use Kafka's default partitioner",
        )
    return None


def _check_amount(doc: Mapping[str, Any], exponents: Mapping[str, int]) -> Rejection | None:
    amount, currency = doc["amount"], doc["currency"]
    match = _AMOUNT.fullmatch(amount)
    if match is None:
        return Rejection(r.BAD_AMOUNT, f'amount {r.quote(amount)} is not a plain decimal such as "12.34"')
    sign, whole, fraction = match.groups()
    whole, significant = whole.lstrip("0"), (fraction or "").rstrip("0")  # digit strings: never int() the whole
    if sign == "-" or not (whole or significant):
        return Rejection(r.NON_POSITIVE_AMOUNT, f"amount {r.quote(amount)} is not positive")
    exponent = exponents.get(currency)
    if exponent is None:
        return Rejection(r.UNKNOWN_CURRENCY, f"currency {r.quote(currency)} is not a known ISO 4217 code")
    if len(significant) > exponent:
        return Rejection(
            r.TOO_MANY_DECIMALS, f"amount {r.quote(amount)} has more than the {exponent} decimals {currency} has"
        )
    minor = whole + significant.ljust(exponent, "0")  # the amount in minor units, as digits
    if len(minor) > len(str(MAX_MINOR_UNITS)) or int(minor) > MAX_MINOR_UNITS:
        return Rejection(
            r.ABSURD_AMOUNT, f"amount {r.quote(amount)} {currency} is above the limit of {MAX_MINOR_UNITS} minor units"
        )
    return None


def _check_domains(doc: Mapping[str, Any]) -> Rejection | None:
    problems = []
    if doc["status"] not in STATUSES:
        problems.append(f"status {r.quote(doc['status'])} is not one of {', '.join(STATUSES)}")
    if doc["channel"] not in CHANNELS:
        problems.append(f"channel {r.quote(doc['channel'])} is not one of {', '.join(CHANNELS)}")
    if not _COUNTRY.fullmatch(doc["country"]):
        problems.append(f"country {r.quote(doc['country'])} is not an ISO 3166-1 alpha-2 code")
    if not _MCC.fullmatch(doc["merchant_category_code"]):
        problems.append(f"merchant_category_code {r.quote(doc['merchant_category_code'])} is not four digits")
    if not _PAN.fullmatch(doc["card_number"]):
        problems.append("card_number is not 12 to 19 digits")  # never quote a card number
    problems += [f"{f} is empty" for f in ("event_id", "customer_id", "merchant_id") if not doc[f].strip()]
    return Rejection(r.INVALID_FIELD, "; ".join(problems)) if problems else None


def parse_record(
    key: bytes | None,
    value: bytes | None,
    partition: int,
    partitions: int,
    ingest_timestamp: int,
    exponents: Mapping[str, int],
) -> ParsedPayment | Rejection:
    """Validate one ingest record (see the module docstring for the order of the checks)."""
    document = _decode(value)
    if isinstance(document, Rejection):
        return document
    rejection = (
        _check_fields(document)
        or _check_key(document, key, partition, partitions)
        or _check_amount(document, exponents)
    )
    if rejection is not None:
        return rejection
    event_time = parse_event_time(document["event_time"])
    if event_time is None:
        return Rejection(
            r.BAD_TIMESTAMP,
            f'event_time {r.quote(document["event_time"])} is not ISO-8601 UTC like "2026-01-05T10:00:00.123Z"',
        )
    if event_time > ingest_timestamp + MAX_CLOCK_SKEW_MS:
        return Rejection(
            r.FUTURE_TIMESTAMP,
            f"event_time {r.quote(document['event_time'])} is more than {MAX_CLOCK_SKEW_MS // 60_000} min after "
            f"the record was ingested ({r.instant(ingest_timestamp)})",
        )
    rejection = _check_domains(document)
    if rejection is not None:
        return rejection
    return ParsedPayment(**{f: document[f] for f in RAW_FIELDS if f != "event_time"}, event_time=event_time)

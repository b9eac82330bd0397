"""Why the enrich job sends a record to ``dlq.enrich``: one stable, machine-readable ``error_class`` each.

A DeadLetter's ``error_class`` is one of the names below (never a Python exception name, never
free text), and its ``reason`` is a sentence for a person that names the field and the value.
Consumers branch on ``error_class``; the names are a public contract and are never renamed.
A reason quotes values from the input only with ``quote``: short, always text that UTF-8 can hold,
whatever the input, and never a card number. Any field may carry one (a sender's bug, or the card
number sent as a JSON number where a string belongs), so every quoted value is masked first
(``ikkai.contract.masking``: a run of 12 or more digits shows its last four only), and a bad-input
reason writes instants as ISO-8601 text, never as epoch millis, so none holds a run of 12 to 19
digits. (The event-time reasons of ``enrich.dedupe`` name instants the job computed as epoch
millis; the values they quote from the input go through ``quote`` too.)

Bad input (decided by ``enrich.parse``, record by record, from the record alone):

==================== ===================================================================
error_class          the ingest record ...
==================== ===================================================================
empty_value          has no value (null or zero bytes)
invalid_utf8         is not valid UTF-8, or is JSON whose strings are not Unicode text (a lone
                     surrogate escape such as "\\ud800", in a value or a key, at any depth)
not_json             is not JSON, or is nested deeper than ``enrich.parse.MAX_NESTING`` levels
not_an_object        is JSON but not an object (an array, a string, a number)
missing_field        lacks a required field (or has it as null)
wrong_type           has a field of the wrong JSON type (amount as a number, card_present as "yes")
bad_amount           has an amount that is not a plain decimal string ("12,34", "1e3", "NaN")
non_positive_amount  has an amount <= 0
absurd_amount        has an amount above MAX_AMOUNT major units
unknown_currency     has a currency that is not a known ISO 4217 code
too_many_decimals    has more decimals than the currency has (e.g. 12.345 EUR, 10.5 JPY)
bad_timestamp        has an event_time that is not ISO-8601 UTC ("2026-01-05T10:00:00.123Z")
future_timestamp     has an event_time more than MAX_CLOCK_SKEW_MS after the ingest record's own timestamp
invalid_field        has a field outside its domain (status, channel, country, MCC, card number),
                     an empty id, or an id longer than ``enrich.parse.MAX_ID_CHARS`` characters
missing_key          has no Kafka key, or an empty payment_id
key_mismatch         has a Kafka key that differs from its payment_id
wrong_partition      sits on a partition other than Kafka's default partition of its key
==================== ===================================================================

Set aside by the sink (``partition_transactions``), not by enrich's checks: ``too_large``, an
output record the producer refuses as too large (``dead_letters.too_large_letter``; its value is the
refused record cut, ``ikkai.dlq.output_topic`` names its topic). The field bounds of ``enrich.parse``
keep every event far below that; the class is the sink's guarantee that no size stops the job.

Event-time rules (decided by ``enrich.dedupe``, per input partition, in offset order):

==================== ===================================================================
late                 event_time is older than the partition's watermark (max event_time - lateness)
duplicate            its event_id was already accepted within the watermark
stale                its payment already has an accepted event with the same or a newer event_time
==================== ===================================================================
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Final

from ikkai.contract.masking import masked_prefix
from spark_jobs.sink import dead_letters

EMPTY_VALUE: Final = "empty_value"
INVALID_UTF8: Final = "invalid_utf8"
NOT_JSON: Final = "not_json"
NOT_AN_OBJECT: Final = "not_an_object"
MISSING_FIELD: Final = "missing_field"
WRONG_TYPE: Final = "wrong_type"
BAD_AMOUNT: Final = "bad_amount"
NON_POSITIVE_AMOUNT: Final = "non_positive_amount"
ABSURD_AMOUNT: Final = "absurd_amount"
UNKNOWN_CURRENCY: Final = "unknown_currency"
TOO_MANY_DECIMALS: Final = "too_many_decimals"
BAD_TIMESTAMP: Final = "bad_timestamp"
FUTURE_TIMESTAMP: Final = "future_timestamp"
INVALID_FIELD: Final = "invalid_field"
MISSING_KEY: Final = "missing_key"
KEY_MISMATCH: Final = "key_mismatch"
WRONG_PARTITION: Final = "wrong_partition"

LATE: Final = "late"
DUPLICATE: Final = "duplicate"
STALE: Final = "stale"

BAD_INPUT_CLASSES: Final = (
    EMPTY_VALUE, INVALID_UTF8, NOT_JSON, NOT_AN_OBJECT, MISSING_FIELD, WRONG_TYPE, BAD_AMOUNT, NON_POSITIVE_AMOUNT,
    ABSURD_AMOUNT, UNKNOWN_CURRENCY, TOO_MANY_DECIMALS, BAD_TIMESTAMP, FUTURE_TIMESTAMP, INVALID_FIELD, MISSING_KEY,
    KEY_MISMATCH, WRONG_PARTITION,
)  # fmt: skip
EVENT_TIME_CLASSES: Final = (LATE, DUPLICATE, STALE)
ERROR_CLASSES: Final = BAD_INPUT_CLASSES + EVENT_TIME_CLASSES

# Kafka-header-style names the DeadLetter's ``headers`` map carries (the same names the outbox DLQ uses).
REASON_HEADER: Final = dead_letters.REASON_HEADER
ERROR_CLASS_HEADER: Final = dead_letters.ERROR_CLASS_HEADER
STAGE_HEADER: Final = dead_letters.STAGE_HEADER
# Only on a dead letter whose copy of the raw key or value was cut (``spark_jobs.sink.dead_letters``).
KEY_BYTES_HEADER: Final = dead_letters.KEY_BYTES_HEADER
VALUE_BYTES_HEADER: Final = dead_letters.VALUE_BYTES_HEADER
VALUE_SHA256_HEADER: Final = dead_letters.VALUE_SHA256_HEADER

QUOTED_CHARS: Final = 60  # characters of an offending value quoted in a reason


def instant(millis: int) -> str:
    """Epoch millis as ISO-8601 UTC text for a reason (``2026-01-05T10:00:00.123Z``); never raises.

    A reason names instants so, never as epoch millis: 13 digits a person cannot read, and which the card
    mask would hide when they happen to pass the Luhn check (``ikkai.contract.masking``)."""
    try:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    except OverflowError:
        return "an instant outside the years 1 to 9999"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def quote(value: object) -> str:
    """``value`` as a reason quotes it: as JSON (bytes as a Python literal), masked, cut to ``QUOTED_CHARS``.

    Always valid UTF-8: a lone surrogate (which a JSON escape can name, but no UTF-8 text can hold)
    is written as its escape ``\\ud800``, so a dead letter and its Kafka headers can always be written.
    Card-number-like digits are masked before the cut, so the cut never leaves a PAN's first digits.
    """
    text = repr(value) if isinstance(value, bytes) else json.dumps(value, ensure_ascii=False)
    return masked_prefix(text.encode("utf-8", "backslashreplace").decode("utf-8"), QUOTED_CHARS)

"""What a dead letter may carry of its input record: a copy that always fits one producer request.

Kafka Connect lands raw records up to its producer's ``max.request.size`` (1 MiB), and any client
may write a record that large to ``events.payments``. A dead letter holding all of one plus its
reason would be over the jobs' producer limit (librdkafka's ``message.max.bytes``, 1,000,000
bytes): the transaction would fail and the job stop on the record it meant to set aside. So a
value over ``DEAD_LETTER_VALUE_BYTES`` is copied cut to its first bytes, a key over
``DEAD_LETTER_KEY_BYTES`` likewise, and headers say so: the original's size and, for a value,
its sha-256. The original itself stays where the dead letter points (source topic, partition,
offset) for as long as that topic's retention keeps it.

The same cut serves the transactional sink when an output record is too large for its topic (over
the topic's ``max.message.bytes`` or the producer's ``message.max.bytes``: a transform's large
column, a dead letter for a DLQ topic that takes less): ``too_large_letter`` is the dead letter,
error class ``too_large``, that takes the place of that input record's outputs, so the batch
commits instead of failing on every restart. Its value is the refused output record, cut so the
letter fits the DLQ topic (``size_bounds.fitted_letter``); ``ikkai.dlq.output_topic`` names where it
was to go, and source topic, partition and offset point to the input record it came from.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from ikkai.contract.masking import masked_prefix

DEAD_LETTER_VALUE_BYTES: Final = 512 * 1024
DEAD_LETTER_KEY_BYTES: Final = 16 * 1024
VALUE_BYTES_HEADER: Final = "ikkai.dlq.value_bytes"
VALUE_SHA256_HEADER: Final = "ikkai.dlq.value_sha256"
KEY_BYTES_HEADER: Final = "ikkai.dlq.key_bytes"
# Kafka-header-style names of a dead letter's headers map (and its Kafka record headers), in every stage.
REASON_HEADER: Final = "ikkai.dlq.reason"
ERROR_CLASS_HEADER: Final = "ikkai.dlq.error_class"
STAGE_HEADER: Final = "ikkai.dlq.stage"
OUTPUT_TOPIC_HEADER: Final = "ikkai.dlq.output_topic"  # too_large: the topic the refused record was for
TOO_LARGE: Final = "too_large"
# A reason is read by people and kept for as long as the dead letter: bounded, and never a card number.
MAX_REASON_CHARS: Final = 1024


def reason_text(error: BaseException) -> str:
    """A dead letter's reason from an error: card-number-like digits masked to their last four, then cut."""
    return masked_prefix(str(error), MAX_REASON_CHARS)


def cut_copy(
    key: bytes | None,
    value: bytes | None,
    key_bytes: int = DEAD_LETTER_KEY_BYTES,
    value_bytes: int = DEAD_LETTER_VALUE_BYTES,
) -> tuple[bytes | None, bytes | None, dict[str, str]]:
    """(key, value) as a dead letter carries them, and the headers that say what was cut (empty: nothing).

    ``key_bytes`` and ``value_bytes`` are what the copy keeps at most: a DLQ topic that takes less than
    the default's ``max.message.bytes`` gets a shorter copy (``size_bounds.fitted_letter``).
    """
    headers: dict[str, str] = {}
    if key is not None and len(key) > key_bytes:
        headers[KEY_BYTES_HEADER] = str(len(key))
        key = key[:key_bytes]
    if value is not None and len(value) > value_bytes:
        headers[VALUE_BYTES_HEADER] = str(len(value))
        headers[VALUE_SHA256_HEADER] = hashlib.sha256(value).hexdigest()
        value = value[:value_bytes]
    return key, value, headers


def too_large_reason(topic: str, size: int, limit: int, *, refused: bool, earlier: str = "") -> str:
    """Why an output record was set aside as too large: sizes and the topic only, never a value; bounded.

    ``refused``: the broker refused it (MSG_SIZE_TOO_LARGE) although it looked within ``limit``;
    ``earlier``: the reason the refused record carried, when it was a dead letter itself.
    """
    if refused:
        why = (f"the broker refused its output record for {topic} ({size:,} bytes) as too large (MSG_SIZE_TOO_LARGE); "
               f"{limit:,} bytes read as that topic's max.message.bytes")  # fmt: skip
    else:
        why = (f"its output record for {topic} is {size:,} bytes, over the {limit:,} bytes a record may have there "
               "(the topic's max.message.bytes and the producer's message.max.bytes)")  # fmt: skip
    why += ": set aside here instead of failing the batch"
    if earlier:
        why += f"; it was a dead letter already ({earlier})"
    return why if len(why) <= MAX_REASON_CHARS else why[: MAX_REASON_CHARS - 1] + "…"


def too_large_letter(
    stage: str,
    source: tuple[str, int, int],
    output: tuple[str, bytes | None, bytes | None, int | None],
    reason: str,
    key_bytes: int = DEAD_LETTER_KEY_BYTES,
    value_bytes: int = DEAD_LETTER_VALUE_BYTES,
) -> tuple[bytes, dict[str, Any], dict[str, str]]:
    """(key, ``dead_letter`` record, headers) for an output record that is too large to produce (``reason``).

    ``source`` is the input record (topic, partition, offset), ``output`` the refused record (topic,
    key, value, timestamp), copied cut to ``key_bytes`` and ``value_bytes``.
    """
    source_topic, source_partition, source_offset = source
    topic, key, value, timestamp = output
    copied_key, copied_value, cut = cut_copy(key, value, key_bytes, value_bytes)
    headers = {STAGE_HEADER: stage, ERROR_CLASS_HEADER: TOO_LARGE, REASON_HEADER: reason, OUTPUT_TOPIC_HEADER: topic,
               **cut}  # fmt: skip
    letter = {
        "stage": stage, "source_topic": source_topic, "source_partition": source_partition,
        "source_offset": source_offset, "key": copied_key, "value": copied_value, "reason": reason,
        "error_class": TOO_LARGE, "source_timestamp": timestamp or 0, "headers": headers,
    }  # fmt: skip
    return copied_key or b"", letter, headers

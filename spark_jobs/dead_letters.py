"""What a dead letter may carry of its input record: a copy that always fits one producer request.

Kafka Connect lands raw records up to its producer's ``max.request.size`` (1 MiB), and any client
may write a record that large to ``events.payments``. A dead letter holding all of one plus its
reason would be over the jobs' producer limit (librdkafka's ``message.max.bytes``, 1,000,000
bytes): the transaction would fail and the job stop on the record it meant to set aside. So a
value over ``DEAD_LETTER_VALUE_BYTES`` is copied cut to its first bytes, a key over
``DEAD_LETTER_KEY_BYTES`` likewise, and headers say so: the original's size and, for a value,
its sha-256. The original itself stays where the dead letter points (source topic, partition,
offset) for as long as that topic's retention keeps it.
"""

from __future__ import annotations

import hashlib
from typing import Final

DEAD_LETTER_VALUE_BYTES: Final = 512 * 1024
DEAD_LETTER_KEY_BYTES: Final = 16 * 1024
VALUE_BYTES_HEADER: Final = "ikkai.dlq.value_bytes"
VALUE_SHA256_HEADER: Final = "ikkai.dlq.value_sha256"
KEY_BYTES_HEADER: Final = "ikkai.dlq.key_bytes"


def cut_copy(key: bytes | None, value: bytes | None) -> tuple[bytes | None, bytes | None, dict[str, str]]:
    """(key, value) as a dead letter carries them, and the headers that say what was cut (empty: nothing)."""
    headers: dict[str, str] = {}
    if key is not None and len(key) > DEAD_LETTER_KEY_BYTES:
        headers[KEY_BYTES_HEADER] = str(len(key))
        key = key[:DEAD_LETTER_KEY_BYTES]
    if value is not None and len(value) > DEAD_LETTER_VALUE_BYTES:
        headers[VALUE_BYTES_HEADER] = str(len(value))
        headers[VALUE_SHA256_HEADER] = hashlib.sha256(value).hexdigest()
        value = value[:DEAD_LETTER_VALUE_BYTES]
    return key, value, headers

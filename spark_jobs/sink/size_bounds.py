"""How large a record, a dead letter, a transaction and a frame of the sink may be, and what is done with more.

No size stops a job (docs/exactly-once.md, "Transactions are bounded"). Each bound, and where it holds:

- **record**: an output record goes to its topic only if ``record_bytes`` (key, value, headers and
  ``RECORD_FRAMING_BYTES``) is within ``record_limit``: the smaller of that topic's
  ``max.message.bytes``, read at start with ``read_topic_limits`` (``SinkConfig.topic_max_message_bytes``),
  and the producer's ``message.max.bytes``. Kafka applies ``max.message.bytes`` to a *record batch*
  (after compression when the producer compresses; the sink's producers do not): its 61-byte header
  and a few dozen bytes per record fit in the framing allowance, so a record within the limit fits
  alone; and the producer's ``batch.size`` is held under the smallest limit of its topics
  (``producer_batch_bytes``), so a batch of several records does too.
- **dead letter**: an input record with an output over its limit becomes one ``too_large`` dead
  letter (``set_aside_too_large``), which itself fits the DLQ topic: the copy of the refused record
  is cut until it does, the reason kept (``fitted_letter``).
- **transaction**: at most ``max_transaction_bytes``, cut only between input records
  (``transaction_chunks``).
- **frame**: a task sends its records to the executor writer in frames of at most ``frame_bytes``
  (``request_frames``); the writer refuses a larger one.

The writer sizes a batch once (``record_sizes``) and gives those sizes to the set-aside and the cut.

All pure but ``read_topic_limits``, the one ``describe_configs`` call.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from confluent_kafka.admin import AdminClient, ConfigResource

from ikkai.contract.codec import default_codec
from ikkai.errors import ConfigError, IkkaiError
from spark_jobs.sink.dead_letters import (
    DEAD_LETTER_KEY_BYTES,
    DEAD_LETTER_VALUE_BYTES,
    ERROR_CLASS_HEADER,
    REASON_HEADER,
    too_large_letter,
    too_large_reason,
)
from spark_jobs.sink.record import SOURCE_OFFSET, SOURCE_PARTITION, TOPIC, Origin, Record, origin

if TYPE_CHECKING:
    import numpy as np

    from ikkai.contract.codec import RecordCodec


class SizedSink(Protocol):
    """What the size rules read of a sink's configuration (``config.SinkConfig`` has it all):
    declared here, so the rules need nothing from the module that uses them."""

    @property
    def query(self) -> str: ...
    @property
    def source_topic(self) -> str: ...
    @property
    def producer_config(self) -> Mapping[str, str]: ...
    @property
    def max_transaction_bytes(self) -> int: ...
    @property
    def topic_max_message_bytes(self) -> Mapping[str, int]: ...
    @property
    def dlq_topic(self) -> str: ...
    @property
    def dlq_stage(self) -> str: ...
    @property
    def dead_letter_codec(self) -> RecordCodec | None: ...


PRODUCER_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's message.max.bytes default
PRODUCER_BATCH_BYTES = 1_000_000  # librdkafka's batch.size default
# Room for a record's framing in the producer's count and the broker's (librdkafka adds at most a few
# dozen bytes per record, the broker 61 per batch): a record within a limit minus this fits.
RECORD_FRAMING_BYTES = 1024
MAX_FRAME_BYTES = 64 * 1024 * 1024  # a frame to the executor writer, at most (less with a smaller transaction bound)
FRAME_SLACK_BYTES = 64 * 1024  # a frame's pickle over its records' record_bytes: far less than their framing allowance


class DeadLetterTooLarge(IkkaiError):
    """Even a dead letter with nothing of its record but the reason is more than the DLQ topic takes."""

    def __init__(self, topic: str, needed: int, limit: int) -> None:
        super().__init__(
            f"dead letter topic {topic} takes records of {limit:,} bytes, a dead letter needs {needed:,}",
            fix=f"raise it: kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
            f"max.message.bytes={needed + RECORD_FRAMING_BYTES}; the job goes on where it stopped",
        )
        self.topic, self.needed, self.limit = topic, needed, limit


def record_bytes(record: Record) -> int:
    """A record's size as a limit counts it (key, value, headers), with room for its framing."""
    _, key, value, _, headers, _, _ = record
    size = len(key or b"") + len(value or b"") + RECORD_FRAMING_BYTES
    if headers:
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        size += sum(len(name.encode()) + len(text.encode()) + 10 for name, text in pairs)
    return size


def record_sizes(records: Sequence[Record]) -> list[int]:
    """``record_bytes`` of each record: the one size pass of a write, which the rules below take as ``sizes``."""
    return [record_bytes(record) for record in records]


def producer_record_limit(config: SizedSink) -> int:
    """The largest record (``record_bytes``) the sink's producer takes: its ``message.max.bytes``."""
    return int(config.producer_config.get("message.max.bytes", PRODUCER_MESSAGE_MAX_BYTES))


def record_limit(config: SizedSink, topic: str) -> int:
    """The largest record (``record_bytes``) ``topic`` takes from the sink: its max.message.bytes, the producer's."""
    producer = producer_record_limit(config)
    read = config.topic_max_message_bytes.get(topic)
    return producer if read is None else min(producer, read)


def producer_batch_bytes(config: SizedSink) -> int | None:
    """The sink's producer's ``batch.size``: under the smallest max.message.bytes of its topics; None: the default."""
    if not config.topic_max_message_bytes:
        return None
    smallest = min(config.topic_max_message_bytes.values()) - RECORD_FRAMING_BYTES
    return max(smallest, 1) if smallest < PRODUCER_BATCH_BYTES else None


def read_topic_limits(admin: AdminClient, topics: Iterable[str], timeout_s: float) -> dict[str, int]:
    """Each topic's ``max.message.bytes`` (its own, or the brokers' default), read now."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in dict.fromkeys(topics)]
    if not resources:
        return {}
    futures = admin.describe_configs(resources, request_timeout=timeout_s)
    return {str(r.name): int(f.result(timeout_s)["max.message.bytes"].value) for r, f in futures.items()}


def set_aside_too_large(
    config: SizedSink, records: Sequence[Record], refused: Collection[Origin] = (), sizes: Sequence[int] | None = None
) -> Sequence[Record]:
    """``records`` with every input record that has an output too large for its topic turned into one dead letter.

    Pure. Too large: over ``record_limit``, or among ``refused`` (input records whose output the
    broker refused as too large: a limit lowered since it was read). The dead letter (on
    ``config.dlq_topic``, error class ``too_large``, ``fitted_letter``) takes the place of all of
    that input record's outputs in this partition: its outcome is the dead letter, never half of its
    outputs. Without a DLQ topic nothing is set aside, and the producer's refusal fails the batch.
    ``sizes``: ``record_sizes(records)`` when the caller has them. When nothing is set aside, the
    result is ``records`` itself (so those sizes still hold for it).
    """
    too_large: dict[Origin, tuple[Record, int, bool]] = {}  # the refused output, its limit, whether the broker said so
    limits: dict[str, int] = {}  # per topic, looked up once
    for i, record in enumerate(records):
        input_record = origin(record)
        if input_record in too_large:
            continue
        topic = record[TOPIC]
        limit = limits.get(topic)
        if limit is None:
            limit = limits[topic] = record_limit(config, topic)
        if (record_bytes(record) if sizes is None else sizes[i]) > limit:
            too_large[input_record] = (record, limit, False)
        elif input_record in refused:
            too_large[input_record] = (record, limit, True)
    if not too_large or not config.dlq_topic:
        return records
    out: list[Record] = []
    set_aside: set[Origin] = set()
    for record in records:
        input_record = origin(record)
        if input_record not in too_large:
            out.append(record)
        elif input_record not in set_aside:  # the first output of that input record becomes its dead letter
            set_aside.add(input_record)
            out.append(fitted_letter(config, input_record, *too_large[input_record]))
    return out


def fitted_letter(config: SizedSink, origin: Origin, refused: Record, limit: int, by_broker: bool) -> Record:
    """The ``too_large`` dead letter of ``refused`` (an output of input record ``origin``) that fits the DLQ topic.

    The copy of the refused record is cut (value first, then key) until the letter, as the DLQ
    topic counts it, is within that topic's limit; the reason is never cut for it.
    """
    codec = config.dead_letter_codec or default_codec()
    topic, key, value, timestamp, headers, _, _ = refused
    pairs = dict(headers.items() if isinstance(headers, Mapping) else headers or ())
    earlier = f"{pairs[ERROR_CLASS_HEADER]}: {pairs.get(REASON_HEADER, '')}" if ERROR_CLASS_HEADER in pairs else ""
    reason = too_large_reason(topic, record_bytes(refused), limit, refused=by_broker, earlier=earlier)
    dlq_limit = record_limit(config, config.dlq_topic)
    key_bytes = min(len(key or b""), DEAD_LETTER_KEY_BYTES)
    value_bytes = min(len(value or b""), DEAD_LETTER_VALUE_BYTES)
    while True:
        letter_key, letter, letter_headers = too_large_letter(
            config.dlq_stage or config.query, (config.source_topic, *origin), (topic, key, value, timestamp), reason,
            key_bytes, value_bytes,
        )  # fmt: skip
        encoded = codec.encode("dead_letter", letter)
        letter_record: Record = (config.dlq_topic, letter_key, encoded, timestamp, letter_headers, *origin)
        excess = record_bytes(letter_record) - dlq_limit
        if excess <= 0:
            return letter_record
        if value_bytes > 0:  # the value's copy is in the letter once
            value_bytes = max(value_bytes - excess, 0)
        elif key_bytes > 0:  # the key's copy is in the letter and its record key
            key_bytes = max(key_bytes - math.ceil(excess / 2), 0)
        else:
            raise DeadLetterTooLarge(config.dlq_topic, record_bytes(letter_record), dlq_limit)


def transaction_chunks(
    records: Sequence[Record], max_bytes: int, sizes: Sequence[int] | None = None
) -> list[Sequence[Record]]:
    """``records`` cut into transactions of at most ``max_bytes`` (``record_bytes``), only between input records.

    Pure. A cut is safe only where every record after it is past, in its source partition, every
    record before it: the first transaction's marker claims its source offsets, and a record below
    them left for the second would be skipped as committed after a crash in between. So records
    whose source offsets go back, or whose outputs of one input record are not adjacent, are not
    cut: one transaction, refused when it is over ``max_bytes`` (the batch's order is the sink's
    ``order_by``). The outputs of one input record are never split; one input record larger than
    ``max_bytes`` is a transaction of its own. ``sizes``: ``record_sizes(records)`` when the caller has them.
    The cut itself is ``transaction_starts``, on arrays (the executor writer's Arrow records take it as they are).
    """
    import numpy as np

    if not records:
        return [records]
    count = len(records)
    starts = transaction_starts(
        np.fromiter((r[SOURCE_PARTITION] for r in records), np.int64, count),
        np.fromiter((r[SOURCE_OFFSET] for r in records), np.int64, count),
        np.fromiter(record_sizes(records) if sizes is None else sizes, np.int64, count),
        max_bytes,
    )
    if starts == [0]:
        return [records]
    return [records[start:stop] for start, stop in zip(starts, [*starts[1:], count], strict=True)]


def transaction_starts(partitions: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, max_bytes: int) -> list[int]:
    """Where each transaction of ``transaction_chunks`` starts, by position: the records given as arrays.

    ``partitions``, ``offsets``: each record's input record (source partition, source offset);
    ``sizes``: its ``record_bytes``. Vectorized: no Python object per record.
    """
    import numpy as np

    if not len(sizes):
        return [0]
    changed = np.ones(len(sizes), dtype=bool)  # where a record names another input record than the one before it
    changed[1:] = (partitions[1:] != partitions[:-1]) | (offsets[1:] != offsets[:-1])
    firsts = np.flatnonzero(changed)  # each input record's first output
    if not _cuttable(partitions[firsts], offsets[firsts]):
        size = int(sizes.sum())
        if size > max_bytes:
            raise ConfigError(
                "sink", "order_by", f"a batch of {size:,} bytes, over the {max_bytes:,} bytes of one transaction, is "
                "not ordered by input record, so it cannot be cut into transactions",
                fix="order the sink's rows by input partition and input offset first (order_by starting with the "
                "source columns), as the jobs do",
            )  # fmt: skip
        return [0]
    per_input = np.add.reduceat(sizes, firsts)
    return [int(firsts[i]) for i in packed_starts(per_input, max_bytes)]


def _cuttable(partitions: np.ndarray, offsets: np.ndarray) -> bool:
    """Per source partition, the input records' offsets (in their order) only grow: the outputs of one input record
    are then adjacent too (``partitions``, ``offsets``: each input record's first output, in order)."""
    import numpy as np

    order = np.argsort(partitions, kind="stable")  # each partition's input records, in the batch's order
    partitions, offsets = partitions[order], offsets[order]
    same = partitions[1:] == partitions[:-1]
    return bool((offsets >= 0).all() and (offsets[1:][same] > offsets[:-1][same]).all())


def packed_starts(sizes: np.ndarray, max_bytes: int) -> list[int]:
    """Where each piece starts when items of ``sizes``, in order, are packed into pieces of at most ``max_bytes``.

    Greedy: a piece takes items while they fit, and one item at least (an item over ``max_bytes`` is a piece of its
    own). Vectorized: one search per piece, not a step per item.
    """
    import numpy as np

    ends = np.cumsum(sizes, dtype=np.int64)
    starts: list[int] = []
    start = 0
    while start < len(ends):
        starts.append(start)
        before = int(ends[start - 1]) if start else 0
        start = max(int(np.searchsorted(ends, before + max_bytes, side="right")), start + 1)
    return starts


def frame_bytes(config: SizedSink) -> int:
    """The most a frame to the executor writer holds (``record_bytes``): one transaction's bound, or one record."""
    return max(min(config.max_transaction_bytes, MAX_FRAME_BYTES), producer_record_limit(config))


def request_frames(records: Sequence[Record], max_bytes: int) -> list[Sequence[Record]]:
    """``records`` cut into frames of at most ``max_bytes`` (``record_bytes``), anywhere between records. Pure."""
    import numpy as np

    if not records:
        return []
    starts = packed_starts(np.fromiter(record_sizes(records), np.int64, len(records)), max_bytes)
    return [records[start:stop] for start, stop in zip(starts, [*starts[1:], len(records)], strict=True)]

"""From payment events to fraud decisions and outbox requests (pure: Arrow or pandas in, the same out).

``decide`` takes Kafka source rows (key, value, topic, partition, offset) of ``events.payments``
and returns the sink's output rows: one ``decisions.fraud`` record per event, plus the outbox
requests its action asks for (``hold`` → hold the payment at payments-api and notify the
customer; ``review`` → put the payment on the payments-api review queue; ``approve`` → none).
A value that does not decode becomes a DeadLetter on the DLQ topic instead of stopping the job.
Each outbox request is built through the outbox contract (``ikkai.contract.outbox.OutboxRequest``,
the checks the sink's HTTP layer needs): one it refuses (a payment id over the 256-byte key, a
control character in it) becomes a dead letter in its place, with the contract's reason; the
decision itself is written.
``decide_arrow`` is the same from and to Arrow, what the job runs (``decide_arrow_batches``).

The work is done for a whole chunk at once (``decided``): decoding into columns, the as-of
join and scoring (numpy arrays, ``fraud_model.payment_features``; pandas is imported only by
``decide`` and ``to_pandas``, never on the job's path) and the Avro encoding of the decisions
(``avro_batch``, column by column); only
the outbox requests of the decisions that ask for side effects are built one by one. The bytes
are those of the row-by-row version it replaced (``tests/spark_jobs/model/test_decide_vectorized.py``).

Everything is a function of the input bytes, the model artifact and the feature snapshots:
``decision_id`` = sha-256 of (payment_id, event_id, model_version), the model's deciding version
(artifact and feature snapshots, ``fraud_model.deciding_version``), timestamps inside the
records are event times, JSON bodies are canonical. The same input always gives the same keys
and values (the Kafka record timestamp is the write time, see ``WRITE_TIME``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from ikkai.contract import topics
from ikkai.contract.codec import RecordCodec, SchemaError
from ikkai.contract.ids import decision_id
from ikkai.contract.outbox import OutboxRequest, OutboxRequestError
from spark_jobs.avro_batch import SameKeys, decode_values, encode_columns, encode_records
from spark_jobs.infer.recorded_cut import RecordedCut
from spark_jobs.model.fraud_model import FEATURES, FraudModel, ModelSource, Snapshots, payment_features
from spark_jobs.sink.dead_letters import cut_copy, reason_text

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa  # type: ignore[import-untyped]

OUTPUT_SCHEMA = (
    "topic string, key binary, value binary, timestamp long, input_partition int, input_offset long, seq int, "
    "headers map<string,string>"  # a dead letter's stage, error class and reason as Kafka headers; null otherwise
)
ORDER_BY = ("input_partition", "input_offset", "seq")
# Kafka record timestamps stay the write time (CreateTime), not the event time: retention is
# judged by record timestamps, so replaying last month's events with event-time timestamps
# would have the broker delete the output right after writing it. Keys and values are the
# deterministic content; the event time travels inside the value.
WRITE_TIME = None


SHADOW_SUFFIX = ".shadow"


@dataclass(frozen=True)
class Topics:
    """Where the decisions, their outbox requests (None: none are asked for) and the dead letters go."""

    decisions: str = topics.DECISIONS_FRAUD
    outbox: str | None = topics.OUTBOX_REQUESTS
    dlq: str = topics.DLQ_INFER

    def shadow(self) -> Topics:
        """A candidate model's topics beside these: ``<decisions>.shadow`` and ``<dlq>.shadow``, no outbox requests.

        A shadow decides what the live model decides and writes it where nothing acts on it: no side
        effect is ever asked for, and its query never counts as writing the live topics.
        """
        return Topics(self.decisions + SHADOW_SUFFIX, None, self.dlq + SHADOW_SUFFIX)

    @property
    def written(self) -> tuple[str, ...]:
        return tuple(t for t in (self.decisions, self.outbox, self.dlq) if t is not None)


def _body(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def outbox_requests(decision: dict[str, Any], customer_id: str) -> list[dict[str, Any]]:
    """The side effects a decision asks for, as outbox_request fields (none for approve), not yet checked.

    ``requested`` builds each through the contract; only what it accepts is written.
    """
    common = {
        "decision_id": decision["decision_id"], "key": decision["payment_id"], "method": "POST",
        "content_type": "application/json", "headers": {}, "created_at": decision["event_time"],
        "model_version": decision["model_version"],
    }  # fmt: skip
    payment = decision["payment_id"]
    # The id is free text from the source system (enrich bounds its length): percent-encoded, it stays one
    # path segment of visible ASCII, which the HTTP layer can carry; an ordinary id is unchanged.
    segment = quote(payment, safe="")
    # Each side effect names itself: the sink keys it by sha-256 of (decision_id, effect), so the
    # hold and the notification of one decision never share an Idempotency-Key.
    if decision["action"] == "hold":
        return [
            {**common, "target": "payments-api", "path": f"/payments/{segment}/hold", "effect": "hold-payment",
             "body": _body({"payment_id": payment, "decision_id": decision["decision_id"], "reason": "fraud-score",
                            "score": decision["score"]})},
            {**common, "target": "notifications-api", "path": "/notifications", "effect": "notify-customer",
             "body": _body({"customer_id": customer_id, "template": "payment-held", "payment_id": payment})},
        ]  # fmt: skip
    if decision["action"] == "review":
        return [{**common, "target": "payments-api", "path": f"/payments/{segment}/review", "effect": "review-payment",
                 "body": _body({"payment_id": payment, "decision_id": decision["decision_id"]})}]  # fmt: skip
    return []


def requested(decision: dict[str, Any], customer_id: str) -> list[OutboxRequest | OutboxRequestError]:
    """Each side effect the decision asks for as the contract's ``OutboxRequest``, or the contract's refusal of it."""
    built: list[OutboxRequest | OutboxRequestError] = []
    for fields in outbox_requests(decision, customer_id):
        try:
            built.append(OutboxRequest.from_record(fields))
        except OutboxRequestError as refusal:
            built.append(refusal)
    return built


def _dead_letter(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
    error: SchemaError | OutboxRequestError, codec: RecordCodec, topics: Topics,
) -> tuple[str, bytes, bytes, dict[str, str]]:  # fmt: skip
    """(topic, key, value, headers) of the DLQ record for an input record that does not decode.

    Or for an outbox request of its decision that the contract refuses: the same copy of the
    input record, the contract's error as the reason.

    A key or value too large is copied cut, with headers that say so (``dead_letters``).
    """
    copied_key, copied_value, cut = cut_copy(key, value)
    reason = reason_text(error)  # bounded, and never a card number the input quoted into the error
    headers = {
        "ikkai.dlq.stage": "infer",
        "ikkai.dlq.error_class": type(error).__name__,
        "ikkai.dlq.reason": reason,
        **cut,
    }
    record = {
        "stage": "infer", "source_topic": topic, "source_partition": partition, "source_offset": offset,
        "key": copied_key, "value": copied_value, "reason": reason, "error_class": type(error).__name__,
        "source_timestamp": 0, "headers": headers,
    }  # fmt: skip
    dlq_key = key if key is not None and copied_key == key else f"{topic}-{partition}-{offset}".encode()
    return topics.dlq, dlq_key, codec.encode("dead_letter", record), headers


@dataclass(frozen=True)
class SourceRows:
    """One chunk of Kafka source rows (key, value, topic, partition, offset), column by column."""

    keys: list[bytes | None]
    values: list[bytes | None]
    topics: list[str]
    partitions: list[int]
    offsets: list[int]

    @classmethod
    def from_pandas(cls, rows: pd.DataFrame) -> SourceRows:
        def binary(column: str) -> list[bytes | None]:
            return [None if v is None else bytes(v) for v in rows[column].tolist()]

        return cls(
            binary("key"), binary("value"), [str(t) for t in rows["topic"].tolist()],
            [int(p) for p in rows["partition"].tolist()], [int(o) for o in rows["offset"].tolist()],
        )  # fmt: skip

    @classmethod
    def from_arrow(cls, rows: pa.RecordBatch | pa.Table) -> SourceRows:
        return cls(*(rows.column(name).to_pylist() for name in ("key", "value", "topic", "partition", "offset")))


@dataclass
class OutputRows:
    """``decide``'s output (``OUTPUT_SCHEMA``) column by column; the timestamp is ``WRITE_TIME`` for every row."""

    topic: list[str] = field(default_factory=list)
    key: list[bytes] = field(default_factory=list)
    value: list[bytes] = field(default_factory=list)
    input_partition: list[int] = field(default_factory=list)
    input_offset: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    headers: list[dict[str, str] | None] = field(default_factory=list)

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        frame = pd.DataFrame({
            "topic": pd.Series(self.topic, dtype=object), "key": pd.Series(self.key, dtype=object),
            "value": pd.Series(self.value, dtype=object),
            "timestamp": pd.array([WRITE_TIME] * len(self.topic), dtype="Int64"),
            "input_partition": np.asarray(self.input_partition, dtype=np.int32),
            "input_offset": np.asarray(self.input_offset, dtype=np.int64),
            "seq": np.asarray(self.seq, dtype=np.int32), "headers": pd.Series(self.headers, dtype=object),
        })  # fmt: skip
        return frame

    def to_arrow(self) -> pa.RecordBatch:
        import pyarrow as pa

        headers = [None if h is None else list(h.items()) for h in self.headers]
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.topic, pa.string()), pa.array(self.key, pa.binary()), pa.array(self.value, pa.binary()),
                pa.nulls(len(self.topic), pa.int64()), pa.array(self.input_partition, pa.int32()),
                pa.array(self.input_offset, pa.int64()), pa.array(self.seq, pa.int32()),
                pa.array(headers, pa.map_(pa.string(), pa.string())),
            ],
            schema=output_arrow_schema(),
        )  # fmt: skip


def output_arrow_schema() -> pa.Schema:
    """``OUTPUT_SCHEMA`` as Arrow types: what ``decide_arrow`` returns."""
    import pyarrow as pa

    return pa.schema([
        ("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("timestamp", pa.int64()),
        ("input_partition", pa.int32()), ("input_offset", pa.int64()), ("seq", pa.int32()),
        ("headers", pa.map_(pa.string(), pa.string())),
    ])  # fmt: skip


def decided(
    source: SourceRows, model: FraudModel, snapshots: Snapshots, codec: RecordCodec, topics: Topics
) -> OutputRows:
    """The output rows for one chunk: its dead letters in input order, then each decision and its outbox requests.

    Vectorized: the payments are decoded into columns, joined with their snapshots as of event
    time, scored and encoded for the whole chunk at once (``avro_batch``); only the few
    decisions that ask for side effects build records one by one.
    """
    out = OutputRows()
    good: list[int] = []
    payments: list[dict[str, Any]] = []
    for i, decoded in enumerate(decode_values(codec, "payment_event", source.values)):
        if isinstance(decoded, SchemaError):
            topic, partition, offset = source.topics[i], source.partitions[i], source.offsets[i]
            letter = _dead_letter(topic, partition, offset, source.keys[i], source.values[i], decoded, codec, topics)
            out.topic.append(letter[0])
            out.key.append(letter[1])
            out.value.append(letter[2])
            out.input_partition.append(partition)
            out.input_offset.append(offset)
            out.seq.append(0)
            out.headers.append(letter[3])
        else:
            good.append(i)
            payments.append(decoded)
    if not payments:
        return out
    columns = {name: [p[name] for p in payments] for name in _PAYMENT_FIELDS}
    features, features_as_of = payment_features(columns, snapshots)
    feature_columns: dict[str, Any] = {name: features[name] for name in FEATURES}
    scores = model.score(features)
    actions = model.actions(scores).tolist()
    payment_ids, event_ids = columns["payment_id"], columns["event_id"]
    ids = [decision_id(p, e, model.version) for p, e in zip(payment_ids, event_ids, strict=True)]
    partitions = [source.partitions[i] for i in good]
    offsets = [source.offsets[i] for i in good]
    decisions = encode_columns(codec, "fraud_decision", {
        "decision_id": ids, "payment_id": payment_ids, "event_id": event_ids, "model_version": model.version,
        "score": scores, "action": actions,
        "features": SameKeys(feature_columns),
        "features_as_of": features_as_of, "event_time": columns["event_time"],
        "input_topic": [source.topics[i] for i in good], "input_partition": partitions, "input_offset": offsets,
    }, len(payments))  # fmt: skip
    keys = [p.encode() for p in payment_ids]
    # position among the payments -> its encoded outbox requests, or the contract's refusal in a request's place
    requests: dict[int, list[bytes | OutboxRequestError]] = {}
    asking = [n for n, action in enumerate(actions) if action != "approve" and topics.outbox is not None]
    if asking:
        wanted = [
            requested({
                "decision_id": ids[n], "payment_id": payment_ids[n], "event_time": columns["event_time"][n],
                "model_version": model.version, "action": actions[n], "score": float(scores[n]),
            }, columns["customer_id"][n])
            for n in asking
        ]  # fmt: skip
        accepted = [r.to_record() for rs in wanted for r in rs if isinstance(r, OutboxRequest)]
        encoded = iter(encode_records(codec, "outbox_request", accepted))
        requests = {
            n: [next(encoded) if isinstance(r, OutboxRequest) else r for r in rs]
            for n, rs in zip(asking, wanted, strict=True)
        }
    for n, value in enumerate(decisions):
        out.topic.append(topics.decisions)
        out.key.append(keys[n])
        out.value.append(value)
        out.input_partition.append(partitions[n])
        out.input_offset.append(offsets[n])
        out.seq.append(0)
        out.headers.append(None)
        for seq, request in enumerate(requests.get(n, ()), start=1):
            if isinstance(request, OutboxRequestError):
                i = good[n]
                letter = _dead_letter(
                    source.topics[i], source.partitions[i], source.offsets[i], source.keys[i], source.values[i],
                    request, codec, topics,
                )  # fmt: skip
                out.topic.append(letter[0])
                out.key.append(letter[1])
                out.value.append(letter[2])
                out.headers.append(letter[3])
            else:
                out.topic.append(str(topics.outbox))
                out.key.append(keys[n])
                out.value.append(request)
                out.headers.append(None)
            out.input_partition.append(partitions[n])
            out.input_offset.append(offsets[n])
            out.seq.append(seq)
    return out


# What the decision needs of a payment event.
_PAYMENT_FIELDS = ("payment_id", "event_id", "customer_id", "amount_minor", "country", "card_present", "event_time")


def decide(
    rows: pd.DataFrame, model: FraudModel, snapshots: Snapshots, codec: RecordCodec, topics: Topics
) -> pd.DataFrame:
    """Output rows (``OUTPUT_SCHEMA``) for one chunk of Kafka source rows."""
    return decided(SourceRows.from_pandas(rows), model, snapshots, codec, topics).to_pandas()


def decide_arrow(
    rows: pa.RecordBatch | pa.Table, model: FraudModel, snapshots: Snapshots, codec: RecordCodec, topics: Topics
) -> pa.RecordBatch:
    """``decide`` from and to Arrow: what the job runs on each Arrow batch of the Kafka source."""
    return decided(SourceRows.from_arrow(rows), model, snapshots, codec, topics).to_arrow()


def decide_arrow_batches(
    batches: Iterator[pa.RecordBatch],
    source: ModelSource,
    topics: Topics,
    codec: RecordCodec,
    cut: RecordedCut | None = None,
) -> Iterator[pa.RecordBatch]:
    """The job's ``mapInArrow`` function: ``decide_arrow`` over each Arrow batch of the Kafka source.

    ``source`` names the model and snapshots and their version; the Python worker loads them
    once and keeps them for every later task (``ModelSource.load``), so a task ships a few paths
    and hashes, never the model or the snapshots. ``codec`` is the wire format the driver chose.
    A replay's ``cut`` (``recorded_cut``) decides each run of rows with the version that decided
    their offsets live instead.
    """
    if cut is None:
        model, snapshots = source.load()
        for batch in batches:
            if batch.num_rows:
                yield decide_arrow(batch, model, snapshots, codec, topics)
        return
    for batch in batches:
        partitions, offsets = batch.column("partition").to_pylist(), batch.column("offset").to_pylist()
        for start, end, decider in cut.runs(partitions, offsets):
            model, snapshots = decider.load()
            yield decide_arrow(batch.slice(start, end - start), model, snapshots, codec, topics)

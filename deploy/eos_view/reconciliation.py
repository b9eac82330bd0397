"""The outbox's reconciliation, as the health view shows it: effects repeated, and requests without a final receipt.

What the contract lets a reader conclude (``ikkai.contract.outbox``, docs/outbox.md "What a receipt means"):

- An **effect** is (``decision_id``, effect): the receipt's ``effect_id``, the request's ``effect_name``. The
  sink sends every attempt of it with one Idempotency-Key, sha-256(decision_id, effect), and the API applies
  a key once and answers repeats with the stored response.
- Receipts are written **at least once**: a task restart or a replay from the DLQ writes another receipt of the
  same effect, with the same key. Two DELIVERED receipts with the same key are one application and a repeated
  answer, **not** a repeated effect (counted as *repeat receipts*, for information).
- An effect is **repeated** when it was DELIVERED under two or more different Idempotency-Keys: the API saw
  distinct keys and applied it once for each (a key derived another way, as by the sink that keyed by
  decision_id alone, or an emitter computing its own). Receipts without a key (written before outbox_receipt
  v2) cannot tell and are not judged.
- A **shared key** is one Idempotency-Key receipted for two different effects: the API answered the second
  with the first's stored response, so one of them was never applied (docs/outbox.md, why not decision_id alone).
- A request's **final receipt** is any receipt of its effect, DELIVERED or DEAD_LETTERED: both are final
  outcomes. A request is judged once its outcome is due: when the outbox sink has committed its offset (the
  sink flushes a request's receipt before it commits the request's offset, ``OutboxSinkTask.preCommit``: below
  the committed offset of a ``connect-*`` group reading ``outbox.requests``, every request has its receipt on
  the broker), or when it is older than ``GRACE_SECONDS`` by its Kafka timestamp (a sink stopped or far
  behind). A judged request with none in the receipts read is **without a final receipt**. The others are
  *in flight* and never judged; so are requests older than where the receipts window starts (their receipt
  may lie before it), and nothing is judged when a receipts partition was not read to its end. A request
  that does not decode gets no receipt (the sink dead-letters it):
  it is counted as *undecodable*, not as missing.

Each first receipt of an effect whose request was read also gives its latency (``delays``, ``deploy.eos_view.latency``).

Windows that line up: the last ``REQUESTS_WINDOW`` offsets of each ``outbox.requests`` partition are read first;
then each ``outbox.receipts`` partition from the first offset at or after the oldest of those requests'
timestamps (less ``GRACE_SECONDS`` for clock skew between producers), at most ``RECEIPTS_WINDOW`` offsets back
from its end. A receipt is written after its request was read, so it is in that window unless the window had
to be cut; then requests older than the cut partition's first receipt read are not judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import IsolationLevel
from confluent_kafka.admin import AdminClient, OffsetSpec

from deploy.eos_view.latency import Point, decision_to_receipt
from deploy.kafka_windows import Deadline, Record, last_records, offsets, window_coverage
from ikkai.contract.codec import RecordCodec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.outbox import RECEIPT_SCHEMA, REQUEST_SCHEMA, EffectKind, Receipt, default_effect, effect_kind_of
from ikkai.contract.topics import OUTBOX_RECEIPTS, OUTBOX_REQUESTS
from ikkai.errors import IkkaiError

GRACE_SECONDS = 60.0
REQUESTS_WINDOW = 500  # offsets before each outbox.requests partition's read_committed end
RECEIPTS_WINDOW = 2000  # at most this many offsets before each outbox.receipts partition's end
MAX_PARTITIONS = 64  # of each topic
SHOWN = 5  # examples of each finding shown

Effect = tuple[str, str]  # (decision_id, effect), as shown
EffectKey = tuple[str, str, str]  # (decision_id, kind, effect): an explicit and a default effect of one name are two


@dataclass(frozen=True)
class RequestSeen:
    decision_id: str
    effect: str  # the request's effect, or target + path
    target: str
    timestamp_ms: int
    where: tuple[str, int, int]  # topic, partition, offset
    effect_kind: EffectKind | None = None  # EXPLICIT: the request named its effect; None: read from the name

    @property
    def key(self) -> EffectKey:
        return self.decision_id, effect_kind_of(self.effect_kind, self.effect, self.target), self.effect


@dataclass(frozen=True)
class ReceiptSeen:
    decision_id: str
    effect: str | None  # None in receipts written before outbox_receipt v2 (then the target identifies it)
    target: str
    delivered: bool
    idempotency_key: str | None
    effect_kind: EffectKind | None = None  # None in receipts written before outbox_receipt v3: read from the name

    @property
    def effect_id(self) -> str:
        return self.effect or self.target

    @property
    def key(self) -> EffectKey:
        return self.decision_id, effect_kind_of(self.effect_kind, self.effect, self.target), self.effect_id


@dataclass(frozen=True)
class Reconciliation:
    requests: int = 0  # decoded requests in the window
    receipts: int = 0  # decoded receipts in the window
    repeated: tuple[Effect, ...] = ()  # effects DELIVERED under more than one key
    shared_keys: tuple[str, ...] = ()  # keys receipted for more than one effect
    repeat_receipts: int = 0  # receipts beyond the first of one (effect, key, outcome): at-least-once, harmless
    judged: int = 0  # requests old enough and inside the receipts window
    in_flight: int = 0  # requests younger than the grace period
    not_judged: int = 0  # older than where the receipts window starts
    missing: tuple[RequestSeen, ...] = ()  # judged requests without a final receipt
    undecodable: int = 0  # records that did not decode as a request or a receipt
    problem: str | None = None  # nothing judged: why
    delays: tuple[Point, ...] = ()  # (receipt time, decision → receipt ms) of receipts whose request was read


def repeated_effects(receipts: Iterable[ReceiptSeen]) -> tuple[list[Effect], list[str], int]:
    """(effects DELIVERED under more than one Idempotency-Key, keys receipted for more than one effect, repeat
    receipts). Receipts without a key are not judged. Pure."""
    keys_of: dict[EffectKey, set[str]] = {}
    effects_of: dict[str, set[EffectKey]] = {}
    seen: set[tuple[EffectKey, str | None, bool]] = set()
    repeats = 0
    for r in receipts:
        effect = r.key
        if (effect, r.idempotency_key, r.delivered) in seen:
            repeats += 1
        seen.add((effect, r.idempotency_key, r.delivered))
        if r.idempotency_key is None:
            continue
        effects_of.setdefault(r.idempotency_key, set()).add(effect)
        if r.delivered:
            keys_of.setdefault(effect, set()).add(r.idempotency_key)
    repeated = sorted({(d, e) for (d, _, e), keys in keys_of.items() if len(keys) > 1})
    shared = sorted(k for k, effects in effects_of.items() if len(effects) > 1)
    return repeated, shared, repeats


def has_final_receipt(request: RequestSeen, finals: set[EffectKey]) -> bool:
    """A receipt of its effect exists (an old receipt without an effect names the target instead). Pure."""
    return request.key in finals or (request.decision_id, "DEFAULT", request.target) in finals


def without_final_receipt(
    requests: Iterable[RequestSeen],
    receipts: Iterable[ReceiptSeen],
    *,
    now_ms: int,
    covered_from_ms: int,
    grace_ms: int = int(GRACE_SECONDS * 1000),
    delivered: Mapping[tuple[str, int], int] | None = None,
) -> tuple[list[RequestSeen], int, int, int]:
    """(requests without a final receipt, judged, in flight, not judged) under the rules above. Pure.

    ``covered_from_ms``: requests written before it may have their receipt before the receipts window.
    ``delivered``: per requests partition, the highest offset a sink's group committed (receipts flushed below it).
    """
    finals = {r.key for r in receipts}
    missing: list[RequestSeen] = []
    judged = in_flight = not_judged = 0
    for request in requests:
        topic, partition, offset = request.where
        due = offset < (delivered or {}).get((topic, partition), 0) or request.timestamp_ms <= now_ms - grace_ms
        if not due:
            in_flight += 1
        elif request.timestamp_ms < covered_from_ms:
            not_judged += 1
        else:
            judged += 1
            if not has_final_receipt(request, finals):
                missing.append(request)
    return sorted(missing, key=lambda r: (r.timestamp_ms, r.where)), judged, in_flight, not_judged


def request_of(record: Record, codec: RecordCodec) -> RequestSeen:
    value = codec.decode(REQUEST_SCHEMA, record.value or b"")
    effect = value.get("effect") or default_effect(value["target"], value["path"])
    where = (record.topic, record.partition, record.offset)
    kind: EffectKind = "EXPLICIT" if value.get("effect") else "DEFAULT"
    return RequestSeen(value["decision_id"], effect, value["target"], record.timestamp_ms, where, kind)


def receipt_of(record: Record, codec: RecordCodec) -> ReceiptSeen:
    r = Receipt.from_record(codec.decode(RECEIPT_SCHEMA, record.value or b""))
    return ReceiptSeen(r.decision_id, r.effect, r.target, r.delivered, r.idempotency_key, r.effect_kind)


def read_reconciliation(
    kafka: KafkaContext,
    admin: AdminClient,
    partitions_of: Mapping[str, Sequence[int]],
    codec: RecordCodec,
    now_ms: int,
    deadline: Deadline,
    *,
    requests_topic: str = OUTBOX_REQUESTS,
    receipts_topic: str = OUTBOX_RECEIPTS,
    delivered: Mapping[tuple[str, int], int] | None = None,
) -> Reconciliation:
    """The reconciliation of the windows above; ``delivered``: per requests partition, the offset the sink's group
    committed (``deploy.eos_view.consumer_lag``), below which every request is judged however young."""
    if requests_topic not in partitions_of:
        return Reconciliation(problem=f"no topic {requests_topic} yet")
    request_partitions = [(requests_topic, p) for p in sorted(partitions_of[requests_topic])][:MAX_PARTITIONS]
    earliest = offsets(admin, request_partitions, OffsetSpec.earliest(), deadline, IsolationLevel.READ_UNCOMMITTED)  # type: ignore[no-untyped-call]
    ends = offsets(admin, request_partitions, OffsetSpec.latest(), deadline)  # type: ignore[no-untyped-call]
    windows = {w: (max(earliest[w], ends[w] - REQUESTS_WINDOW), ends[w]) for w in request_partitions}
    request_records, unread = last_records(kafka, windows, deadline)
    if unread:
        return Reconciliation(problem=f"{len(unread)} {requests_topic} partition(s) not read to their end in time")
    requests, undecodable = [], 0
    for record in request_records:
        try:
            requests.append(request_of(record, codec))
        except (IkkaiError, KeyError, TypeError, ValueError):
            undecodable += 1
    receipts: list[ReceiptSeen] = []
    receipted: list[tuple[str, str, int]] = []  # (decision id, effect, the receipt's timestamp)
    covered_from = 0
    if receipts_topic in partitions_of:
        receipt_partitions = [(receipts_topic, p) for p in sorted(partitions_of[receipts_topic])][:MAX_PARTITIONS]
        since = max(0, min((r.timestamp_ms for r in requests), default=0) - int(GRACE_SECONDS * 1000))
        at_time = offsets(admin, receipt_partitions, OffsetSpec.for_timestamp(since), deadline)
        ends = offsets(admin, receipt_partitions, OffsetSpec.latest(), deadline)  # type: ignore[no-untyped-call]
        # for_timestamp answers -1 when no record is that new: nothing to read there
        starts = {w: ends[w] if at_time[w] < 0 else at_time[w] for w in receipt_partitions}
        cut = {w for w in receipt_partitions if starts[w] < ends[w] - RECEIPTS_WINDOW}
        windows = {w: (max(starts[w], ends[w] - RECEIPTS_WINDOW), ends[w]) for w in receipt_partitions}
        receipt_records, unread = last_records(kafka, windows, deadline)
        if unread:
            return Reconciliation(problem=f"{len(unread)} {receipts_topic} partition(s) not read to their end in time")
        for record in receipt_records:
            try:
                receipts.append(receipt_of(record, codec))
            except (IkkaiError, KeyError, TypeError, ValueError):
                undecodable += 1
                continue
            receipted.append((receipts[-1].decision_id, receipts[-1].effect_id, record.timestamp_ms))
        covered_from = window_coverage(receipt_records, cut)
    repeated, shared, repeats = repeated_effects(receipts)
    missing, judged, in_flight, not_judged = without_final_receipt(requests, receipts, now_ms=now_ms,
                                                                   covered_from_ms=covered_from,
                                                                   delivered=delivered)  # fmt: skip
    delays = decision_to_receipt([(r.decision_id, r.timestamp_ms) for r in requests], receipted)
    return Reconciliation(len(requests), len(receipts), tuple(repeated), tuple(shared), repeats, judged, in_flight,
                          not_judged, tuple(missing), undecodable, delays=tuple(delays))  # fmt: skip

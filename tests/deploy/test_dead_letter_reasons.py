"""Dead letters by reason (deploy/eos_view/dead_letter_reasons.py): counting by (topic, stage, error class) over plain
records, the newest reason masked as the logs mask text from outside, and, on the real broker, dead letters
written with the stages' headers read back from the end of their topic."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.eos_view.dead_letter_reasons import (
    ERROR_CLASS_HEADER,
    LAST_RECORDS,
    REASON_HEADER,
    SHOWN_REASON_CHARS,
    STAGE_HEADER,
    UNKNOWN,
    ReasonCount,
    by_reason,
    read_dead_letters,
    shown_reason,
)
from deploy.kafka_windows import Deadline, Record
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import DLQ_ENRICH, DLQ_OUTBOX
from spark_jobs.sink import dead_letters

PAN = "4111111111111111"


def letter(topic: str, offset: int, stage: str | None, error_class: str | None, reason: str, ms: int = 0) -> Record:
    headers = [(n, v.encode()) for n, v in ((STAGE_HEADER, stage), (ERROR_CLASS_HEADER, error_class),
                                            (REASON_HEADER, reason)) if v is not None]  # fmt: skip
    return Record(topic, 0, offset, ms or 1000 + offset, b"k", b"value", tuple(headers))


def test_the_header_names_are_the_ones_the_stages_write() -> None:
    assert (STAGE_HEADER, ERROR_CLASS_HEADER, REASON_HEADER) == (
        dead_letters.STAGE_HEADER, dead_letters.ERROR_CLASS_HEADER, dead_letters.REASON_HEADER
    )  # fmt: skip


def test_dead_letters_are_counted_by_topic_stage_and_class_most_first_with_the_newest_reason() -> None:
    records = [
        letter(DLQ_ENRICH, 0, "enrich", "missing_field", "missing field amount"),
        letter(DLQ_ENRICH, 1, "enrich", "bad_amount", "amount '1e3' is no decimal"),
        letter(DLQ_ENRICH, 2, "enrich", "missing_field", "missing field currency"),
        letter(DLQ_OUTBOX, 0, "outbox", "retries-exhausted", "gave up after 5 attempts"),
        letter(DLQ_OUTBOX, 1, None, None, "written by someone else"),
    ]
    assert by_reason(records) == [
        ReasonCount(DLQ_ENRICH, "enrich", "missing_field", 2, "missing field currency", 1002),
        ReasonCount(DLQ_ENRICH, "enrich", "bad_amount", 1, "amount '1e3' is no decimal", 1001),
        ReasonCount(DLQ_OUTBOX, UNKNOWN, UNKNOWN, 1, "written by someone else", 1001),
        ReasonCount(DLQ_OUTBOX, "outbox", "retries-exhausted", 1, "gave up after 5 attempts", 1000),
    ]


def test_a_reason_never_shows_a_card_number_or_a_credential() -> None:
    reason = "card 4111 1111 1111 1111 refused by https://user:s3cret@api.example/pay?token=abc&x=1 " + "z" * 300
    shown = shown_reason(reason)
    assert "4111 1111" not in shown and "************1111" in shown
    assert "s3cret" not in shown and "abc" not in shown and "<redacted>@api.example" in shown
    assert len(shown) == 200 and shown.endswith("…")
    (count,) = by_reason([letter(DLQ_ENRICH, 0, "enrich", "invalid_field 4111111111111111", reason)])
    assert "4111111111111111" not in count.error_class and "4111 1111" not in count.newest_reason


# On the real broker.


@pytest.mark.integration
def test_recent_dead_letters_are_read_from_their_topics_end_by_their_headers(cluster: KafkaContext) -> None:
    kafka = cluster
    topic = f"dlq.test-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka.client_config())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(kafka.producer_config())
    old = [(STAGE_HEADER, b"enrich"), (ERROR_CLASS_HEADER, b"not_json"), (REASON_HEADER, b"old")]
    for _ in range(LAST_RECORDS):  # beyond the window: never counted
        producer.produce(topic, value=b"x", headers=old)
    for i in range(3):
        new = [
            (STAGE_HEADER, b"infer"),
            (ERROR_CLASS_HEADER, b"ValueError"),
            (REASON_HEADER, f"card {PAN} #{i}".encode()),
        ]
        producer.produce(topic, value=b"x", headers=new)
    producer.flush(30)
    found = read_dead_letters(kafka, admin, {topic: [0], "not-a-dlq": [0]}, Deadline(30))
    assert found.problem is None and found.unread == ()
    counts = {(r.stage, r.error_class): r for r in found.reasons}
    assert counts[("infer", "ValueError")].count == 3
    assert counts[("infer", "ValueError")].newest_reason == "card ************1111 #2"
    assert counts[("enrich", "not_json")].count == LAST_RECORDS - 3  # the window is the last LAST_RECORDS offsets
    assert abs(counts[("infer", "ValueError")].newest_ms / 1000 - time.time()) < 3600


def test_a_megabyte_reason_of_digit_groups_is_shown_from_its_prefix_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reason from another writer may be huge, and masking costs per group of digits: the page masks a bounded
    prefix (``masked_prefix``), before the cut."""
    from ikkai.contract import masking

    masked: list[int] = []
    original = masking.mask_card_numbers

    def spy(text: str) -> str:
        masked.append(len(text))
        return original(text)

    monkeypatch.setattr(masking, "mask_card_numbers", spy)
    shown = shown_reason("x" * 190 + "4111 1111 1111 1111 " + "1 " * 500_000)
    assert len(shown) == SHOWN_REASON_CHARS and "4111" not in shown and shown.endswith("*********…")
    assert masked and max(masked) < 10 * SHOWN_REASON_CHARS, masked

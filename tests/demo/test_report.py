"""The report and its invariants over hand-made facts: a clean run passes, each broken promise is named."""

from __future__ import annotations

import dataclasses
import json

import pytest

from demo.chaos import ACTIONS, KILL_INFER, RESTART_WORKER
from demo.facts import REPLAYED, ChaosEvent, Decision, Expectation, Facts, ReceiptSeen, SideEffectRequest, replay_topic
from demo.invariants import as_landed, page_survived_broker_kills
from demo.measures import TopicRecord, content_digest
from demo.report import build_report, report_text
from ikkai.contract.topics import DECISIONS_FRAUD as DECISIONS
from ikkai.contract.topics import DLQ_ENRICH, DLQ_INFER, DLQ_OUTBOX
from ikkai.contract.topics import EVENTS_PAYMENTS as EVENTS
from ikkai.contract.topics import INGEST_PAYMENTS as INGEST
from ikkai.contract.topics import OUTBOX_RECEIPTS as RECEIPTS
from ikkai.contract.topics import OUTBOX_REQUESTS as OUTBOX


def records(values: list[tuple[bytes, bytes]], ts: int = 1000) -> list[TopicRecord]:
    return [TopicRecord(i % 2, i // 2, ts + i, k, v) for i, (k, v) in enumerate(values)]


def clean_facts() -> Facts:
    """Three lines: two events (p1 held: two side effects; p2 approved) and one dead letter."""
    lines = [b'{"payment_id":"p1"}', b'{"payment_id":"p2"}', b"not json"]
    decisions = [Decision("d1", "p1", "e1", "hold", 1500), Decision("d2", "p2", "e2", "approve", 1600)]
    requests = [SideEffectRequest("d1", "payments-api", "payments", "hold-payment", "k1"),
                SideEffectRequest("d1", "notifications-api", "notifications", "notify-customer", "k2")]  # fmt: skip
    topics = {
        INGEST: records([(b"p1", lines[0]), (b"p2", lines[1]), (b"", lines[2])], ts=1000),
        EVENTS: records([(b"p1", b"E1"), (b"p2", b"E2")]),
        DLQ_ENRICH: records([(b"", b"DL")]),
        DECISIONS: records([(b"p1", b"D1"), (b"p2", b"D2")], ts=1500),
        OUTBOX: records([(b"p1", b"O1"), (b"p1", b"O2")]),
        DLQ_INFER: [],
        RECEIPTS: records([(b"d1", b"R1"), (b"d1", b"R2")], ts=1900),
        DLQ_OUTBOX: [],
    }
    return Facts(
        seed=7, size=2, raw_lines=lines, expectation=Expectation(3, 2, {"not_json": 1}), topics=topics,
        event_ids=["e1", "e2"], dead_letter_reasons=["not_json"], decisions=decisions, requests=requests,
        receipts=[ReceiptSeen("d1", "payments-api", "DELIVERED", 1900, "hold-payment"),
                  ReceiptSeen("d1", "notifications-api", "DELIVERED", 2000, "notify-customer"),
                  ReceiptSeen("d1", "payments-api", "DELIVERED", 2500, "hold-payment")],  # a repeat after a restart
        applied=[("payments", "k1"), ("notifications", "k2")],
        deliveries=[("payments", "k1", False), ("notifications", "k2", False), ("payments", "k1", True)],
        replay={replay_topic(t): list(topics[t]) for t in REPLAYED},
        chaos=[ChaosEvent(KILL_INFER, 10.0, "decided 1/2", 1.0), ChaosEvent(RESTART_WORKER, 20.0, "decided 2/2", 30.0)],
        chaos_planned=ACTIONS, seconds={"total": 100.0},
    )  # fmt: skip


def failed(facts: Facts) -> list[str]:
    return list(build_report(facts)["failed"])


def test_a_clean_run_passes_and_counts_add_up() -> None:
    report = build_report(clean_facts())
    assert report["passed"], report["failed"]
    assert report["stages"]["enriched"] == {EVENTS: 2, DLQ_ENRICH: 1}
    assert report["duplicate_decisions"] == 0
    assert report["dead_letters_by_reason"] == {"not_json": 1}
    assert report["decisions_by_action"] == {"approve": 1, "hold": 1}
    assert report["side_effects"] == {
        "decisions_with_side_effects": 1, "requested": 2, "applied": 2, "max_applied_per_request": 1,
        "http_requests": 3, "answered_from_stored_response": 1,
    }  # fmt: skip
    assert report["receipts"] == {"records": 3, "delivered": 2, "dead_lettered": 0, "repeats": 1}
    assert report["latency_ms"]["ingest_to_decision"] == {"count": 2, "p50": 500.0, "p95": 599.0, "p99": 599.0,
                                                          "max": 599.0}  # fmt: skip
    assert report["latency_ms"]["decision_to_receipt"]["max"] == 500.0  # first receipt per (decision, target)
    assert report["digests"]["live"] == report["digests"]["replay"]
    json.dumps(report)  # -o json
    text = report_text(report)
    assert "duplicate decisions: 0" in text and "demo passed" in text and "FAIL" not in text


def test_a_lost_raw_line_and_a_duplicated_one_are_both_seen() -> None:
    f = clean_facts()
    ingest = f.topics[INGEST]
    lost = dataclasses.replace(f, topics={**f.topics, INGEST: [*ingest[:2], ingest[0]]})
    assert "every raw line landed once" in failed(lost)


def test_lines_with_bad_utf8_count_as_landed_with_replacement_characters() -> None:
    assert as_landed(b"m-\xff") == "m-\ufffd".encode()


def test_enrich_losing_a_record_breaks_in_equals_out_plus_dlq() -> None:
    f = clean_facts()
    broken = dataclasses.replace(f, topics={**f.topics, DLQ_ENRICH: []}, dead_letter_reasons=[])
    assert {"enrich: in = out + DLQ", "enrich: outcome per line as the generator expects"} <= set(failed(broken))


def test_a_duplicate_decision_is_counted_and_fails() -> None:
    f = clean_facts()
    twice = dataclasses.replace(f, decisions=[*f.decisions, f.decisions[0]])
    report = build_report(twice)
    assert report["duplicate_decisions"] == 1
    assert {"duplicate decisions: 0", "one decision per event"} <= set(report["failed"])


def test_a_side_effect_applied_never_or_unasked_fails() -> None:
    f = clean_facts()
    assert "side effects applied per request: exactly 1" in failed(dataclasses.replace(f, applied=f.applied[:1]))
    extra = dataclasses.replace(f, applied=[*f.applied, ("payments", "d9")])
    assert "side effects applied per request: exactly 1" in failed(extra)


def test_a_missing_or_dead_lettered_receipt_fails() -> None:
    f = clean_facts()
    assert "every request has a DELIVERED receipt" in failed(dataclasses.replace(f, receipts=f.receipts[:1]))
    dead = [dataclasses.replace(r, outcome="DEAD_LETTERED") for r in f.receipts]
    assert "every request has a DELIVERED receipt" in failed(dataclasses.replace(f, receipts=dead))


def test_a_replay_that_differs_or_did_not_run_fails() -> None:
    f = clean_facts()
    assert f.replay is not None
    changed = {**f.replay, replay_topic(DECISIONS): records([(b"p1", b"D1"), (b"p2", b"D2-other")])}
    assert failed(dataclasses.replace(f, replay=changed)) == [f"replay: {DECISIONS} identical"]
    assert f"replay: {DECISIONS} identical" in failed(dataclasses.replace(f, replay=None))


@pytest.mark.parametrize("recovered", [None, "skipped"])
def test_chaos_that_did_not_happen_or_recover_fails(recovered: str | None) -> None:
    f = clean_facts()
    chaos = (
        [f.chaos[0]]
        if recovered == "skipped"
        else [f.chaos[0], dataclasses.replace(f.chaos[1], recovered_seconds=None)]
    )
    assert failed(dataclasses.replace(f, chaos=chaos)) == ["chaos happened and the pipeline recovered"]


def test_without_chaos_nothing_is_expected_of_it() -> None:
    f = dataclasses.replace(clean_facts(), chaos=[], chaos_planned=())
    assert build_report(f)["passed"]


def test_long_notes_wrap_after_commas() -> None:
    from demo.report import wrap_note

    assert wrap_note("") == [""]
    assert wrap_note("a 1, b 2, c 3", width=9) == ["a 1, b 2,", "c 3"]
    assert wrap_note("averyveryverylongreason 12", width=5) == ["averyveryverylongreason 12"]


@pytest.mark.parametrize(
    ("answers", "ok"),
    [
        ({"flow": 200, "health": 200}, True),
        ({"flow": 200, "health": 500}, False),  # a view that broke
        ({"flow": "ConnectionError"}, False),  # the server gone: nothing answered
        ({"server": "not running"}, False),  # its thread ended
        ({}, False),  # asked for nothing: no proof it survived
        (None, False),  # there was no page to ask
    ],
)
def test_after_broker_kills_the_page_must_have_answered_every_view(
    answers: dict[str, int | str] | None, ok: bool
) -> None:
    kills = ("kill -9 broker 1/2", "kill -9 broker 2/2")
    f = dataclasses.replace(clean_facts(), chaos_planned=ACTIONS + kills, page_answers=answers)
    f = dataclasses.replace(f, chaos=[*f.chaos, *(ChaosEvent(k, 40.0, "decided 2/2", 5.0) for k in kills)])
    survived = page_survived_broker_kills(f)
    assert survived is not None and survived.ok is ok, survived
    assert survived.detail.startswith("after 2 broker kill(s): ")
    assert failed(f) == ([] if ok else ["the page survived the broker kills"])


def test_without_broker_kills_the_page_is_not_judged() -> None:
    f = dataclasses.replace(clean_facts(), page_answers={"flow": 500})  # the page's own tests judge it then
    assert page_survived_broker_kills(f) is None
    assert build_report(f)["passed"]


def test_the_report_gives_the_content_digest_of_the_decoded_events_and_decisions() -> None:
    """Beside the byte digests: the one two runs of a seed share (demo.measures.content_digest)."""
    contents = {
        EVENTS: [{"event_id": "e1", "payment_id": "p1", "ingested_at": 1000}],
        DECISIONS: [{"decision_id": "d1", "event_id": "e1", "action": "hold", "input_partition": 0, "input_offset": 0}],
    }
    report = build_report(dataclasses.replace(clean_facts(), contents=contents))
    expected = {topic: content_digest(topic, records) for topic, records in contents.items()}
    assert report["digests"]["content"] == expected
    text = report_text(report)
    assert f"{EVENTS} content sha256 {expected[EVENTS]}" in text
    assert f"{DECISIONS} content sha256 {expected[DECISIONS]}" in text
    assert build_report(clean_facts())["digests"]["content"] == {}  # nothing decoded, nothing claimed

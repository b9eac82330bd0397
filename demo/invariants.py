"""The promises the demo checks, each a pure function of what it observed (``Facts``).

Every check returns an ``Invariant`` with a one-line detail that says what was compared, so a
failing report names the broken promise and the numbers behind it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from demo.chaos import KILL_BROKER, kind_of
from demo.facts import REPLAYED, Facts, replay_topic
from demo.measures import topic_digest
from ikkai.contract.topics import DLQ_ENRICH, DLQ_INFER, DLQ_OUTBOX, EVENTS_PAYMENTS, INGEST_PAYMENTS


@dataclass(frozen=True)
class Invariant:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def as_landed(line: bytes) -> bytes:
    """A raw line as a FileStreamSource lands it: read as UTF-8 (bad bytes become U+FFFD), written as UTF-8."""
    return line.decode("utf-8", errors="replace").encode()


def ingest_complete(f: Facts) -> Invariant:
    landed = Counter(r.value or b"" for r in f.topics[INGEST_PAYMENTS])
    written = Counter(as_landed(line) for line in f.raw_lines)
    missing = sum((written - landed).values())
    extra = sum((landed - written).values())
    return Invariant(
        "every raw line landed once",
        missing == 0 and extra == 0,
        f"{len(f.raw_lines)} lines written, {len(f.topics[INGEST_PAYMENTS])} records in {INGEST_PAYMENTS} "
        f"({missing} missing, {extra} extra or duplicated)",
    )


def enrich_accounts(f: Facts) -> Invariant:
    ingested, events, dead = (len(f.topics[t]) for t in (INGEST_PAYMENTS, EVENTS_PAYMENTS, DLQ_ENRICH))
    return Invariant(
        "enrich: in = out + DLQ",
        ingested == events + dead,
        f"{ingested} ingested = {events} events + {dead} dead letters"
        + ("" if ingested == events + dead else f" (off by {ingested - events - dead})"),
    )


def enrich_as_expected(f: Facts) -> Invariant:
    expected = f.expectation
    got = Counter(f.dead_letter_reasons)
    problems = []
    if expected.events is not None and expected.events != len(f.topics[EVENTS_PAYMENTS]):
        problems.append(f"events {len(f.topics[EVENTS_PAYMENTS])}, generator expects {expected.events}")
    if expected.dead_letters is not None:
        for reason in sorted(set(expected.dead_letters) | set(got)):
            if expected.dead_letters.get(reason, 0) != got.get(reason, 0):
                problems.append(f"{reason} {got.get(reason, 0)}, expected {expected.dead_letters.get(reason, 0)}")
    return Invariant(
        "enrich: outcome per line as the generator expects",
        not problems,
        "; ".join(problems)
        or f"{len(f.topics[EVENTS_PAYMENTS])} events and {sum(got.values())} dead letters by reason",
    )


def one_decision_per_event(f: Facts) -> Invariant:
    decided = Counter(d.event_id for d in f.decisions)
    events = Counter(f.event_ids)
    undecided = len(set(events) - set(decided))
    unknown = len(set(decided) - set(events))
    ok = undecided == 0 and unknown == 0 and len(f.decisions) == len(f.event_ids)
    return Invariant(
        "one decision per event",
        ok,
        f"{len(f.event_ids)} events, {len(f.decisions)} decisions ({undecided} events undecided, "
        f"{unknown} decisions without an event)",
    )


def duplicate_decisions(f: Facts) -> int:
    return sum(n - 1 for n in Counter(d.decision_id for d in f.decisions).values() if n > 1)


def no_duplicate_decisions(f: Facts) -> Invariant:
    duplicates = duplicate_decisions(f)
    return Invariant("duplicate decisions: 0", duplicates == 0, f"{duplicates} decision(s) written more than once")


def outbox_consistent(f: Facts) -> Invariant:
    decided = {d.decision_id for d in f.decisions}
    orphans = sum(1 for r in f.requests if r.decision_id not in decided)
    repeated = sum(n - 1 for n in Counter((r.decision_id, r.effect) for r in f.requests).values() if n > 1)
    return Invariant(
        "outbox requests belong to decisions",
        orphans == 0 and repeated == 0,
        f"{len(f.requests)} requests: {orphans} without a decision, {repeated} repeated",
    )


def side_effects_once(f: Facts) -> Invariant:
    requested = Counter(r.idempotency_key for r in f.requests)  # one key space, as a gateway keeps
    applied = Counter(key for _, key in f.applied)
    never = sum(1 for k in requested if applied[k] == 0)
    twice = sum(1 for k in requested if applied[k] > 1)
    unasked = sum(1 for k in applied if k not in requested)
    return Invariant(
        "side effects applied per request: exactly 1",
        never == 0 and twice == 0 and unasked == 0,
        f"{len(requested)} requested, {len(f.applied)} applied by the receiver "
        f"({never} never, {twice} more than once, {unasked} nobody asked for)",
    )


def every_request_receipted(f: Facts) -> Invariant:
    outcomes: dict[tuple[str, str], str] = {}
    for receipt in f.receipts:  # receipts of one effect may disagree: DELIVERED wins (docs/outbox.md)
        known = outcomes.get((receipt.decision_id, receipt.effect))
        outcomes[(receipt.decision_id, receipt.effect)] = "DELIVERED" if known == "DELIVERED" else receipt.outcome
    wanted = {(r.decision_id, r.effect) for r in f.requests}
    missing = len(wanted - set(outcomes))
    failed = sum(1 for k in wanted if outcomes.get(k, "DELIVERED") != "DELIVERED")
    return Invariant(
        "every request has a DELIVERED receipt",
        missing == 0 and failed == 0,
        f"{len(wanted)} requests, {len(wanted) - missing} receipted, {missing} without receipt, {failed} not delivered",
    )


def nothing_dead_lettered_downstream(f: Facts) -> Invariant:
    infer, outbox = len(f.topics[DLQ_INFER]), len(f.topics[DLQ_OUTBOX])
    return Invariant(
        "no dead letters after enrich", infer == 0 and outbox == 0, f"{DLQ_INFER} {infer}, {DLQ_OUTBOX} {outbox}"
    )


def chaos_done(f: Facts) -> Invariant:
    done = [e.action for e in f.chaos if e.recovered_seconds is not None]
    failures = {e.action: e.failure for e in f.chaos if e.recovered_seconds is None and e.failure}
    missing = [a + (f" ({failures[a]})" if a in failures else "") for a in f.chaos_planned if a not in done]
    return Invariant(
        "chaos happened and the pipeline recovered",
        not missing,
        ("not done or not recovered: " + ", ".join(missing)) if missing else ", ".join(done) or "no chaos asked for",
    )


def page_survived_broker_kills(f: Facts) -> Invariant | None:
    """The page the demo serves answered every view it was asked for (200) after the run's broker kills; None
    when no broker was to be killed (nothing to survive)."""
    kills = sum(1 for action in f.chaos_planned if kind_of(action) == KILL_BROKER)
    if not kills:
        return None
    answers = dict(f.page_answers or {})
    failing = {view: answer for view, answer in answers.items() if answer != 200}
    said = ", ".join(f"{view} {answer}" for view, answer in sorted(answers.items()))
    return Invariant(
        "the page survived the broker kills",
        bool(answers) and not failing,
        f"after {kills} broker kill(s): " + (said if answers else "the page was not asked (it was not running)"),
    )


def replay_identical(f: Facts, topic: str) -> Invariant:
    if f.replay is None:
        return Invariant(f"replay: {topic} identical", False, "the replay did not run")
    live, again = topic_digest(f.topics[topic]), topic_digest(f.replay[replay_topic(topic)])
    return Invariant(
        f"replay: {topic} identical",
        live == again,
        f"sha256 {live[:16]}… live, {again[:16]}… replayed"
        + f" ({len(f.topics[topic])} vs {len(f.replay[replay_topic(topic)])} records)",
    )


CHECKS: tuple[Callable[[Facts], Invariant], ...] = (
    ingest_complete,
    enrich_accounts,
    enrich_as_expected,
    one_decision_per_event,
    no_duplicate_decisions,
    outbox_consistent,
    side_effects_once,
    every_request_receipted,
    nothing_dead_lettered_downstream,
    chaos_done,
)


def check_all(f: Facts) -> list[Invariant]:
    results = [check(f) for check in CHECKS]
    results += [replay_identical(f, topic) for topic in REPLAYED]
    survived = page_survived_broker_kills(f)
    return results if survived is None else [*results, survived]

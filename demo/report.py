"""The demo's report: built from ``Facts`` (pure), printed as text or as JSON (``-o json``).

The JSON form is the contract the tests read; the text form is the same data for people. The page of
``--html`` (demo/report_html.py) draws it, and for its pictures the report also keeps what the text does not
print: the latencies per bucket (``latency_histogram_ms``) and the records per second into each stage
(``stage_rates``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from itertools import pairwise
from typing import Any

from demo.chaos import kind_of
from demo.facts import LIVE_TOPICS, REPLAYED, Facts, replay_topic
from demo.invariants import check_all, duplicate_decisions
from demo.measures import content_digest, first_seen, latencies, latency_summary, topic_digest
from demo.phases import phase_lines
from ikkai.contract.topics import DECISIONS_FRAUD, DLQ_ENRICH, INGEST_PAYMENTS, OUTBOX_RECEIPTS, PIPELINE

STAGES = tuple((stage.name, stage.topics) for stage in PIPELINE)


# Edges of the latency histogram's buckets in ms (the last bucket is open): fixed, so two runs compare.
LATENCY_EDGES_MS = (0, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 60000)
RATE_BUCKETS = 60  # at most this many points per stage in ``stage_rates``


def latency_histogram(values_ms: list[float]) -> list[dict[str, float | int | None]]:
    """Counts per bucket of ``LATENCY_EDGES_MS`` (``to_ms`` None: the open last bucket), up to the last non-empty."""
    bounds = [*pairwise(LATENCY_EDGES_MS), (LATENCY_EDGES_MS[-1], None)]
    counts = [sum(1 for v in values_ms if lo <= v and (hi is None or v < hi)) for lo, hi in bounds]
    used = max((i + 1 for i, c in enumerate(counts) if c), default=0)
    return [{"from_ms": lo, "to_ms": hi, "count": c} for (lo, hi), c in zip(bounds[:used], counts[:used], strict=True)]


def _latency_values(f: Facts) -> dict[str, list[float]]:
    ingested = {key.decode(errors="replace"): ts for key, ts in first_seen(f.topics[INGEST_PAYMENTS]).items()}
    decided = {d.decision_id: d.timestamp for d in f.decisions}
    first_receipts: dict[tuple[str, str], int] = {}
    for receipt in f.receipts:
        first_receipts.setdefault((receipt.decision_id, receipt.target), receipt.timestamp)
    return {
        "ingest_to_decision": latencies(ingested, ((d.payment_id, d.timestamp) for d in f.decisions)),
        "decision_to_receipt": latencies(decided, ((decision, ts) for (decision, _), ts in first_receipts.items())),
    }


def stage_rates(f: Facts) -> dict[str, Any]:
    """Records per second written into each stage's topics, in at most ``RATE_BUCKETS`` equal steps from the
    first record any live topic holds (Kafka CreateTime, read_committed) to the last."""
    stamps = [r.timestamp for topic in LIVE_TOPICS for r in f.topics[topic]]
    if not stamps:
        return {"step_s": None, "rates": {stage: [] for stage, _ in STAGES}}
    first, last = min(stamps), max(stamps)
    step_ms = max(1000, -(-(last - first + 1) // RATE_BUCKETS))
    steps = -(-(last - first + 1) // step_ms)
    rates: dict[str, list[float]] = {}
    for stage, topics in STAGES:
        counts = Counter((r.timestamp - first) // step_ms for topic in topics for r in f.topics[topic])
        rates[stage] = [round(counts.get(i, 0) / (step_ms / 1000), 1) for i in range(steps)]
    return {"step_s": step_ms / 1000, "rates": rates}


def build_report(f: Facts) -> dict[str, Any]:
    invariants = check_all(f)
    waits = _latency_values(f)
    counts = {topic: len(f.topics[topic]) for topic in LIVE_TOPICS}
    receipts_first: dict[tuple[str, str], str] = {}
    for receipt in f.receipts:
        receipts_first.setdefault((receipt.decision_id, receipt.target), receipt.outcome)
    resent = sum(1 for _, _, replayed in f.deliveries if replayed)
    report: dict[str, Any] = {
        "seed": f.seed,
        "size": f.size,
        "raw_lines": len(f.raw_lines),
        "held_back": dict(sorted(f.held_back.items())),
        "stages": {stage: {t: counts[t] for t in topics} for stage, topics in STAGES},
        "expected": {
            "events": f.expectation.events,
            "dead_letters": dict(sorted((f.expectation.dead_letters or {}).items())),
        },
        "dead_letters_by_reason": dict(sorted(Counter(f.dead_letter_reasons).items())),
        "decisions_by_action": dict(sorted(Counter(d.action for d in f.decisions).items())),
        "duplicate_decisions": duplicate_decisions(f),
        "side_effects": {
            "decisions_with_side_effects": len({r.decision_id for r in f.requests}),
            "requested": len(f.requests),
            "applied": len(f.applied),
            "max_applied_per_request": max(Counter(f.applied).values(), default=0),
            "http_requests": len(f.deliveries),
            "answered_from_stored_response": resent,
        },
        "receipts": {
            "records": len(f.receipts),
            "delivered": sum(1 for o in receipts_first.values() if o == "DELIVERED"),
            "dead_lettered": sum(1 for o in receipts_first.values() if o != "DELIVERED"),
            "repeats": len(f.receipts) - len(receipts_first),
        },
        "latency_ms": {name: latency_summary(values) for name, values in waits.items()},
        "latency_histogram_ms": {name: latency_histogram(values) for name, values in waits.items()},
        "stage_rates": stage_rates(f),
        "digests": {
            "live": {topic: topic_digest(f.topics[topic]) for topic in REPLAYED},
            "replay": (
                {topic: topic_digest(f.replay[replay_topic(topic)]) for topic in REPLAYED}
                if f.replay is not None
                else None
            ),
            # The same for every run of the seed: without the fields a run sets itself (demo.measures).
            "content": {topic: content_digest(topic, records) for topic, records in f.contents.items()},
        },
        "chaos": [e.__dict__ for e in f.chaos],
        "seconds": {k: round(v, 1) for k, v in f.seconds.items()},
        "phases": [p.as_dict() for p in f.phases],
        "invariants": [i.as_dict() for i in invariants],
        "failed": [i.name for i in invariants if not i.ok],
        "passed": all(i.ok for i in invariants),
    }
    return report


def _ms(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f}s" if value >= 1000 else f"{value:.0f}ms"


def _by(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def wrap_note(note: str, width: int = 72) -> list[str]:
    """A comma-separated note in lines of at most ``width`` characters, broken after commas."""
    lines = [""]
    for part in note.split(", "):
        candidate = f"{lines[-1]}, {part}" if lines[-1] else part
        if len(candidate) > width and lines[-1]:
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] = candidate
    return lines


SPELLED_OUT = 4  # chaos actions listed one by one; more (a soak) are summed up per kind


def chaos_lines(events: list[dict[str, Any]]) -> list[str]:
    """One line per chaos action; for a soak one per kind (count, recovery median and max) and each failure."""
    if len(events) <= SPELLED_OUT:
        return [
            f"chaos: {e['action']} at {e['at_seconds']:.0f}s ({e['progress']}), back in "
            + (f"{e['recovered_seconds']:.0f}s" if e["recovered_seconds"] is not None else "never")
            + (f": {e['failure']}" if e.get("failure") else "")
            for e in events
        ]
    lines = []
    for kind in dict.fromkeys(kind_of(e["action"]) for e in events):
        mine = [e for e in events if kind_of(e["action"]) == kind]
        back = sorted(e["recovered_seconds"] for e in mine if e["recovered_seconds"] is not None)
        lines.append(
            f"chaos: {kind} x{len(mine)}, {len(back)} recovered"
            + (f", back in median {statistics.median(back):.0f}s, max {back[-1]:.0f}s" if back else "")
        )
        lines += [f"  {e['action']} at {e['at_seconds']:.0f}s never recovered: {e['failure']}" for e in mine
                  if e["recovered_seconds"] is None]  # fmt: skip
    return lines


def report_text(r: dict[str, Any]) -> str:
    chaos = chaos_lines(r["chaos"])
    lines = [
        f"ikkai demo: seed {r['seed']}, {r['size']} payments as {r['raw_lines']} raw lines",
        *([f"held back, a file cannot carry them as generated: {_by(r['held_back'])}"] if r["held_back"] else []),
        *(chaos or ["chaos: none (--no-chaos)"]),
        "",
        f"{'STAGE':<10} {'TOPIC (read_committed)':<24} {'RECORDS':>8}",
    ]
    notes = {
        DLQ_ENRICH: _by(r["dead_letters_by_reason"]),
        DECISIONS_FRAUD: _by(r["decisions_by_action"]),
        OUTBOX_RECEIPTS: f"delivered {r['receipts']['delivered']}, dead-lettered {r['receipts']['dead_lettered']}, "
        f"repeats {r['receipts']['repeats']}",
    }
    for stage, topics in r["stages"].items():
        for i, (topic, count) in enumerate(topics.items()):
            first, *rest = wrap_note(notes.get(topic, ""))
            lines.append(f"{stage if i == 0 else '':<10} {topic:<24} {count:>8}  {first}".rstrip())
            lines += [f"{'':<44}  {more}" for more in rest]
    s = r["side_effects"]
    once = next(i["ok"] for i in r["invariants"] if i["name"].startswith("side effects applied"))
    lines += [
        "",
        f"duplicate decisions: {r['duplicate_decisions']}",
        f"side effects applied per side effect: {'exactly 1' if once else 'NOT exactly 1'} "
        f"({s['applied']} applied for {s['requested']} requested by {s['decisions_with_side_effects']} decisions; "
        f"receiver DB)",
        f"  the sink sent {s['http_requests']} HTTP requests; {s['answered_from_stored_response']} were repeats "
        "answered from the stored response, applying nothing",
        "",
        f"{'LATENCY':<20} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}",
    ]
    for name, label in (("ingest_to_decision", "ingest → decision"), ("decision_to_receipt", "decision → receipt")):
        m = r["latency_ms"][name]
        lines.append(f"{label:<20} {_ms(m['p50']):>8} {_ms(m['p95']):>8} {_ms(m['p99']):>8} {_ms(m['max']):>8}")
    live, replay = r["digests"]["live"], r["digests"]["replay"] or {}
    lines += [
        "",
        f"{DECISIONS_FRAUD} sha256 {live[DECISIONS_FRAUD]}",
        f"{'replayed':>15} sha256 {replay.get(DECISIONS_FRAUD, '-')}",
        *(f"{topic} content sha256 {digest}" for topic, digest in r["digests"].get("content", {}).items()),
    ]
    lines += ["", "INVARIANTS"]
    lines += [f"  {'ok  ' if i['ok'] else 'FAIL'}  {i['name']}: {i['detail']}" for i in r["invariants"]]
    phases = phase_lines(r.get("phases", []), r["seconds"].get("total"))
    lines += ["", *phases] if phases else []
    seconds = ", ".join(f"{k} {v:.0f}s" for k, v in r["seconds"].items())
    verdict = "passed" if r["passed"] else "FAILED: " + ", ".join(r["failed"])
    lines += ["", f"demo {verdict}" + (f" ({seconds})" if seconds else "")]
    return "\n".join(lines)

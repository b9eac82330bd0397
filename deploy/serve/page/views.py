"""The page's rows, shaped from what ``deploy.bundle_ops`` returns for plan and status, and from
``deploy.eos_view.health``'s samples (markers, consumer lag, dead letters by reason, the reconciliation, the latency
per minute). Pure.

Secrets are already redacted there (plans mask secret values on both sides, status cuts literal secrets and
URL credentials out of traces); these functions only choose what a person reads at a glance.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploy.applies import LastApply
from deploy.eos_view.dead_letter_reasons import shown_reason
from deploy.eos_view.health import Health
from deploy.eos_view.latency import Bucket, buckets
from deploy.eos_view.reconciliation import SHOWN

IN_SYNC = "in sync"
DRIFTED = "drifted"
AS_RENDERED = "as rendered now"
CHANGED = "changed since"


def environments(bundles_dir: Path) -> dict[str, list[str]]:
    """Environment → the bundles that have values for it (``<bundle>/values/<env>.yaml``), both sorted."""
    found: dict[str, list[str]] = {}
    for manifest in sorted(bundles_dir.glob("*/bundle.yaml")):
        for values in sorted((manifest.parent / "values").glob("*.yaml")):
            found.setdefault(values.stem, []).append(manifest.parent.name)
    return dict(sorted(found.items()))


def first_line(trace: str | None) -> str | None:
    """The exception line of a Java trace (what failed), without the stack below it."""
    if not trace:
        return None
    return next((line.strip() for line in trace.splitlines() if line.strip()), None)


def last_apply_view(last: LastApply | None, digest: str) -> dict[str, Any] | None:
    """The bundle's last recorded apply: when, by whom, its result, and whether the bundle renders now as it
    did then (``digest``: the current render's ``deploy.applies.config_digest``); None when none is recorded."""
    if last is None:
        return None
    return {"when": last.when, "who": last.who, "result": last.result,
            "since": AS_RENDERED if last.digest == digest else CHANGED}  # fmt: skip


def bundle_row(
    bundle: str, plan: Mapping[str, Any], *, owner: str = "", last_apply: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """In sync or drifted, with each connector's pending action and changed keys (the diff shown on click), the
    bundle's owner and its last apply (``last_apply_view``)."""
    connectors = [
        {
            "name": c["name"],
            "action": c["action"],
            "live_state": c["live_state"],
            "target_state": c["target_state"],
            "changes": c["changes"],
            "validation_errors": c["validation_errors"],
        }
        for c in plan.get("connectors", [])
        if c["action"] != "unchanged" or c["state_change"] or c["validation_errors"]
    ]
    return {
        "bundle": bundle,
        "owner": owner,
        "last_apply": last_apply,
        "sync": DRIFTED if plan.get("pending") else IN_SYNC,
        "valid": plan.get("valid", True),
        "summary": plan.get("summary", {}),
        "drift": connectors,
        "unpruned": plan.get("unpruned", []),
    }


def connector_rows(status: Mapping[str, Any], restarts: Mapping[str, int]) -> list[dict[str, Any]]:
    """Each connector: state, worker, the first line of its failure, its tasks, and the loop's restarts of it."""
    return [
        {
            "name": c["name"],
            "state": c["state"],
            "target_state": c["target_state"],
            "worker": c["worker"],
            "failure": first_line(c["trace"]),
            "restarts": restarts.get(c["name"], 0),
            "tasks": [
                {"id": t["id"], "state": t["state"], "worker": t["worker"], "failure": first_line(t["trace"])}
                for t in c["tasks"]
            ],
        }
        for c in status.get("connectors", [])
    ]


def health_tables(health: Health) -> list[dict[str, Any]]:
    """Per query, a row per output partition: its last marker (batch, source offsets, age) and any open transaction."""
    tables = []
    for (app, query), partitions in health.queries.items():
        rows = []
        for p in partitions:
            marker, txn, age = p.marker, p.open_transaction, p.age_seconds(health.at)
            offsets = sorted(marker.source_offsets.items()) if marker else []
            rows.append({
                "partition": p.partition,
                "batch": marker.batch_id if marker else None,
                "source_topic": marker.source_topic if marker else "",
                "source_offsets": " ".join(f"{i}:{o}" for i, o in offsets),
                "records": marker.records if marker else None,
                "writer_version": marker.writer_version if marker else "",
                "handed_over_to": marker.handed_over_to if marker else "",
                "age": None if age is None else round(age),
                "transaction": "stuck" if p.stuck else "open" if txn else "",
                "open_for": None if txn is None else round(health.at - txn.since),
                "committed_end": p.ends.committed,
                "high_watermark": p.ends.high,
                "problem": p.problem,
            })  # fmt: skip
        tables.append({"app": app, "query": query, "topic": partitions[0].topic, "rows": rows})
    return tables


def lag_tables(health: Health) -> list[dict[str, Any]]:
    """Per query, then per sink connector: its lag in all and on each input partition (end, committed, lag)."""
    return [
        {
            "kind": lag.kind, "name": lag.name, "state": lag.state, "total": lag.total,
            "rows": [{"topic": p.topic, "partition": p.partition, "end": p.end, "committed": p.committed,
                      "lag": p.lag} for p in lag.partitions],
        }
        for lag in (*health.lags.queries, *health.lags.sinks)
    ]  # fmt: skip


def dead_letter_rows(health: Health) -> list[dict[str, Any]]:
    """Per (dlq topic, stage, error class): how many of the recent dead letters, the newest reason (masked), its age."""
    return [
        {"topic": r.topic, "stage": r.stage, "error_class": r.error_class, "count": r.count, "reason": r.newest_reason,
         "age": max(0, round(health.at - r.newest_ms / 1000))}
        for r in health.dead_letters.reasons
    ]  # fmt: skip


def _id(text: str) -> str:
    """A decision id or an Idempotency-Key as shown: its first 16 characters (a sha-256 hex is unique by then),
    masked like any text a service wrote."""
    return shown_reason(text if len(text) <= 16 else text[:16] + "…")


def reconciliation_view(health: Health) -> dict[str, Any]:
    """The reconciliation's counts, and a few examples of each finding (ids only: no body, no header)."""
    r = health.reconciliation
    return {
        "problem": r.problem, "requests": r.requests, "receipts": r.receipts, "repeated": len(r.repeated),
        "repeated_examples": [f"{_id(d)} {shown_reason(e)}" for d, e in r.repeated[:SHOWN]],
        "shared_keys": len(r.shared_keys), "shared_examples": [_id(k) for k in r.shared_keys[:SHOWN]],
        "repeat_receipts": r.repeat_receipts, "judged": r.judged, "in_flight": r.in_flight,
        "not_judged": r.not_judged, "missing": len(r.missing), "undecodable": r.undecodable,
        "missing_examples": [
            {"decision": _id(m.decision_id), "effect": shown_reason(m.effect),
             "age": round(health.at - m.timestamp_ms / 1000), "where": f"{m.where[0]}-{m.where[1]}@{m.where[2]}"}
            for m in r.missing[:SHOWN]
        ],
    }  # fmt: skip


def event_decisions_view(health: Health) -> dict[str, Any]:
    """Events without a decision and events decided twice: counts and a few positions (``partition@offset``)."""
    d = health.event_decisions
    return {
        "problem": d.problem, "source_topic": d.source_topic, "events": d.events, "decisions": d.decisions,
        "judged": d.judged, "in_flight": d.in_flight, "not_judged": d.not_judged,
        "without": len(d.without), "without_examples": [f"{p}@{o}" for p, o in d.without[:SHOWN]],
        "twice": len(d.twice), "twice_examples": [f"{p}@{o}" for p, o in d.twice[:SHOWN]],
    }  # fmt: skip


def latency_buckets(health: Health) -> tuple[list[Bucket], list[Bucket]]:
    """Produced → decision and decision → receipt, per minute over the last ``latency.BUCKETS`` minutes."""
    now_ms = int(health.at * 1000)
    return buckets(health.event_decisions.delays, now_ms), buckets(health.reconciliation.delays, now_ms)


def latency_rows(health: Health) -> list[dict[str, Any]]:
    """A row per minute in which either latency has a point, newest first: its count, p50 and p99 in seconds."""
    decided, receipted = latency_buckets(health)

    def seconds(ms: int | None) -> float | None:
        return None if ms is None else round(ms / 1000, 3)

    return [
        {"minute": round(health.at - d.start_ms / 1000) // 60, "decided": d.count, "decided_p50": seconds(d.p50_ms),
         "decided_p99": seconds(d.p99_ms), "receipted": r.count, "receipted_p50": seconds(r.p50_ms),
         "receipted_p99": seconds(r.p99_ms)}
        for d, r in reversed(list(zip(decided, receipted, strict=True)))
        if d.count or r.count
    ]  # fmt: skip

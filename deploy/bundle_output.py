"""Text renderings of plans, apply results, lint findings and status for ``ikkai bundle``. Pure.

JSON output is the ``as_dict`` of the same objects; these are for people. Secret values are
already redacted in the data they receive.
"""

from __future__ import annotations

from typing import Any

SYMBOL = {"create": "+", "update": "~", "delete": "-", "unchanged": "="}


def plan_text(data: dict[str, Any]) -> str:
    lines = [f"bundle {data['bundle']} env {data['env']}"]
    for c in data["connectors"]:
        state = c["target_state"] or ""
        note = f" ({c['live_state'] or 'absent'} → {state})" if c["state_change"] else ""
        lines.append(f"  {SYMBOL[c['action']]} {c['action']:<9} {c['name']}  {c['class'].rsplit('.', 1)[-1]}{note}")
        for change in c["changes"]:
            if change["live"] is None:
                lines.append(f"      + {change['key']}: {change['desired']}")
            elif change["desired"] is None:
                lines.append(f"      - {change['key']}: {change['live']}")
            else:
                lines.append(f"      ~ {change['key']}: {change['live']} → {change['desired']}")
        if c.get("failed_tasks"):
            tasks = ", ".join(map(str, c["failed_tasks"]))
            lines.append(
                f"      ! task(s) {tasks} FAILED: a config write will not fix that; see status, then restart --failed"
            )
        for error in c["validation_errors"]:
            lines.append(f"      ! {error['key']}: {error['message']}")
    for name in data.get("unpruned", []):
        lines.append(f"  ? owned     {name}  not in the bundle any more (apply --prune deletes it)")
    s = data["summary"]
    verdict = (
        "invalid: Connect rejected settings above"
        if not data["valid"]
        else ("changes pending" if data["pending"] else "no changes")
    )
    lines.append(
        f"plan: {s['create']} to create, {s['update']} to update, {s['delete']} to delete, "
        f"{s['unchanged']} unchanged; {verdict}"
    )
    return "\n".join(lines)


def apply_text(data: dict[str, Any]) -> str:
    lines = [plan_text(data["plan"])]
    for name, state in sorted(data["states"].items()):
        lines.append(f"{name}: {state}")
    for name in data["deleted"]:
        lines.append(f"{name}: deleted")
    lines.append(f"apply: {len(data['written'])} connector(s) written, {len(data['deleted'])} deleted")
    return "\n".join(lines)


def lint_text(data: dict[str, Any]) -> str:
    lines = []
    for f in data["findings"]:
        status = f"waived ({f['waived']})" if f["waived"] else "ERROR"
        where = f" {f['key']}" if f["key"] else ""
        lines.append(f"{status:<7} {f['check']:<28} {f['connector']}{where}: {f['message']}")
        if not f["waived"]:
            lines.append(f"        fix: {f['fix']}")
    lines.append(f"lint: {data['errors']} error(s), {data['waived']} waived")
    return "\n".join(lines)


def status_text(data: dict[str, Any]) -> str:
    lines = [f"{'CONNECTOR':<40} {'STATE':<10} {'TARGET':<8} {'TASKS':<24} WORKER"]
    for row in data["connectors"]:
        tasks = ",".join(f"{t['id']}:{t['state']}" for t in row["tasks"]) or "-"
        target = row["target_state"] or "(pruned)"
        lines.append(f"{row['name']:<40} {row['state']:<10} {target:<8} {tasks:<24} {row['worker'] or '-'}")
        if row["trace"]:
            lines.append(f"    connector trace: {row['trace']}")
        for t in row["tasks"]:
            if t["trace"]:
                lines.append(f"    task {t['id']} trace: {t['trace']}")
    return "\n".join(lines)


def render_text(data: dict[str, Any]) -> str:
    lines = [f"# owner: {data['owner']}", ""] if data.get("owner") else []
    for c in data["connectors"]:
        lines.append(f"# {c['name']} ({c['template']}, target state {c['state']})")
        lines += [f"{k}={v}" for k, v in sorted(c["config"].items())]
        lines.append("")
    return "\n".join(lines).rstrip()

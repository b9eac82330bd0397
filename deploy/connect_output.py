"""Text renderings of ``ikkai connect`` results, for people. Pure.

JSON output is the data itself (deploy.connect_ops); secret values are already masked in it.
"""

from __future__ import annotations

import json
from typing import Any


def list_text(data: dict[str, Any]) -> str:
    lines = [f"{'NAME':<44} {'TYPE':<7} {'STATE':<10} {'TASKS':<20} CLASS"]
    for row in data["connectors"]:
        lines.append(
            f"{row['name']:<44} {row['type'] or '-':<7} {row['state'] or '-':<10} {row['tasks_summary']:<20} "
            f"{row['class'].rsplit('.', 1)[-1]}"
        )
    if not data["connectors"]:
        lines.append(f"(no connectors on {data['connect_url']})")
    return "\n".join(lines)


def describe_text(data: dict[str, Any]) -> str:
    lines = [
        f"Name:     {data['name']}",
        f"Type:     {data['type'] or '-'}",
        f"Class:    {data['class']}",
        f"State:    {data['state']}" + (f" (worker {data['worker']})" if data["worker"] else ""),
    ]
    if data["trace"]:
        lines.append(f"Trace:    {data['trace']}")
    lines.append("Config:")
    lines += [f"  {key}: {value}" for key, value in data["config"].items()]
    lines.append("Tasks:" if data["tasks"] else "Tasks:    none")
    for task in data["tasks"]:
        lines.append(f"  {task['id']}: {task['state']}" + (f" (worker {task['worker']})" if task["worker"] else ""))
        if task["trace"]:
            lines.append(f"     trace: {task['trace']}")
    lines.append("Topics:   " + (", ".join(data["topics"]) or "none yet"))
    return "\n".join(lines)


def offsets_text(data: dict[str, Any]) -> str:
    lines = [f"{'PARTITION':<60} OFFSET"]
    for entry in data["offsets"]:
        lines.append(f"{_compact(entry['partition']):<60} {_compact(entry['offset'])}")
    if not data["offsets"]:
        lines.append(f"(no offsets committed for {data['connector']})")
    return "\n".join(lines)


def offsets_changed_text(data: dict[str, Any]) -> str:
    return (
        f"{data['connector']}: offsets {'reset' if data['action'] == 'reset' else 'altered'} "
        f"({data['message'] or 'no message'}); state {data['state_before']} -> {data['state_after']}"
    )


def loggers_text(data: dict[str, Any]) -> str:
    lines = [f"{'LOGGER':<60} LEVEL"]
    lines += [f"{row['logger']:<60} {row['level']}" for row in data["loggers"]]
    return "\n".join(lines)


def logger_set_text(data: dict[str, Any]) -> str:
    if data["scope"] == "cluster":
        return f"{data['logger']}: {data['level']} requested on every worker (cluster scope applies asynchronously)"
    return f"{data['logger']}: {data['level']} on this worker; changed: {', '.join(data['changed']) or 'none'}"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))

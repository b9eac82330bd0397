"""Processes that run against a stack without being part of it (the jobs and the receiver ``ikkai demo --keep``
leaves running), recorded in the stack's home so that ``ikkai stack down`` stops them first: left alone, they
would go on against a stopped broker.

``attach(home, name, pid)`` records a process by its pid and its start time (psutil's ``create_time``): a pid
reused by another process after ours ended is never signalled. ``stop_attached(home)`` TERMs each recorded process
group, KILLs what is left after ``GRACE_SECONDS``, and forgets them.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from stack import processes
from stack.stack_security import write_private

ATTACHED_FILE = "attached.json"
GRACE_SECONDS = 20.0  # a Spark driver commits or aborts its open transaction and stops its query in that time


def _file(home: Path) -> Path:
    return home / ATTACHED_FILE


def _recorded(home: Path) -> dict[str, dict[str, float]]:
    try:
        data = json.loads(_file(home).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def attach(home: Path, name: str, pid: int) -> None:
    """Record ``pid`` (named ``name``) as running against the stack of ``home``."""
    found = _recorded(home)
    found[name] = {"pid": pid, "started": psutil.Process(pid).create_time()}
    write_private(_file(home), json.dumps(found, indent=1) + "\n")  # 0600, as every file of the stack


def _ours(entry: dict[str, float]) -> bool:
    try:
        process = psutil.Process(int(entry["pid"]))
        return abs(process.create_time() - float(entry["started"])) < 0.01 and process.status() not in processes.EXITED
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def stop_attached(home: Path, grace_seconds: float = GRACE_SECONDS) -> list[str]:
    """Stop every recorded process still running (its process group: TERM, then KILL after ``grace_seconds``);
    return their names. The record is removed."""
    live = {name: int(entry["pid"]) for name, entry in _recorded(home).items() if _ours(entry)}
    processes.stop_groups(list(live.values()), grace_seconds=grace_seconds)
    _file(home).unlink(missing_ok=True)
    return sorted(live)

"""When to restart a failed connector again: capped exponential backoff per connector, at most
``max_restarts`` times, with its state kept in a small JSON file across ``ikkai serve`` restarts.

Strimzi's KafkaConnector ``autoRestart`` (``enabled``, ``maxRestarts``), outside Kubernetes: the
first restart is immediate, the (n+1)-th waits ``min(cap, base * 2**(n-1))`` after the n-th; with
``max_restarts`` set, a connector still FAILED after that many restarts is left alone until a person
restarts it. Once the connector has been healthy for ``reset_after`` seconds the count starts again
from zero. Times are wall-clock seconds (``time.time()``) so that the state file stays true when the
service restarts; ``RestartBackoff`` itself is pure, the file is read and written by
``RestartStateFile``: owner-only, written whole to a fresh ``.partial`` file (``O_EXCL``, no link
followed) and renamed over the old one, so that neither a crash nor a planted link leaves it half
written or writes it elsewhere. Counts are unbounded; the backoff they give is capped at any count.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ikkai.errors import ConfigError

STATE_VERSION = 1
MAX_DOUBLINGS = 64  # base · 2**64 is past any cap; 2**(count-1) itself overflows a float from count 1,025


@dataclass
class RestartBackoff:
    base: float = 2.0
    cap: float = 300.0
    reset_after: float = 600.0
    max_restarts: int | None = None  # None: no limit (Strimzi's default)
    _count: dict[str, int] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    _healthy_since: dict[str, float] = field(default_factory=dict)

    def delay(self, connector: str) -> float:
        """Seconds to wait after the previous restart: 0 before the first, then base, 2·base, … up to cap."""
        count = self._count.get(connector, 0)
        if count == 0:
            return 0.0
        return min(self.cap, self.base * 2.0 ** min(count - 1, MAX_DOUBLINGS))  # no overflow at any count

    def exhausted(self, connector: str) -> bool:
        """True when ``max_restarts`` restarts were made and the connector has not been healthy since."""
        return self.max_restarts is not None and self._count.get(connector, 0) >= self.max_restarts

    def due(self, connector: str, now: float) -> bool:
        """True when a failed ``connector`` may be restarted at ``now``."""
        if self.exhausted(connector):
            return False
        last = self._last.get(connector)
        return last is None or now - last >= self.delay(connector)

    def next_restart_at(self, connector: str) -> float | None:
        """When the next restart may happen (None: at once, or never when exhausted)."""
        last = self._last.get(connector)
        if last is None or self.exhausted(connector):
            return None
        return last + self.delay(connector)

    def restarted(self, connector: str, now: float) -> None:
        self._last[connector] = now
        self._count[connector] = self._count.get(connector, 0) + 1
        self._healthy_since.pop(connector, None)

    def healthy(self, connector: str, now: float) -> bool:
        """Note that ``connector`` is healthy at ``now``; True when that changed the state."""
        if connector not in self._count and connector not in self._healthy_since:
            return False  # never restarted: nothing to remember
        since = self._healthy_since.setdefault(connector, now)
        if now - since >= self.reset_after:
            self._count.pop(connector, None)
            self._last.pop(connector, None)
            self._healthy_since.pop(connector, None)
            return True
        return since == now

    def restarts(self, connector: str) -> int:
        return self._count.get(connector, 0)

    # -- state, as the file holds it -------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Restart count, last restart, next restart and whether the limit was reached, per connector."""
        names = sorted(set(self._count) | set(self._healthy_since))
        return {
            "version": STATE_VERSION,
            "max_restarts": self.max_restarts,
            "connectors": {
                name: {
                    "restarts": self._count.get(name, 0),
                    "last_restart": self._last.get(name),
                    "next_restart_at": self.next_restart_at(name),
                    "next_backoff_seconds": self.delay(name),
                    "healthy_since": self._healthy_since.get(name),
                    "exhausted": self.exhausted(name),
                }
                for name in names
            },
        }

    def restore(self, state: Mapping[str, Any], source: str = "state") -> None:
        """Take over the counts and times of ``state()`` (the limits stay this object's own)."""
        connectors = state.get("connectors")
        if state.get("version") != STATE_VERSION or not isinstance(connectors, Mapping):
            raise ConfigError(
                source, "version", f"not an auto-restart state of version {STATE_VERSION}", fix="delete the file"
            )
        for name, entry in connectors.items():
            if not isinstance(entry, Mapping):
                raise ConfigError(source, f"connectors.{name}", "malformed entry", fix="delete the file")
            count = _entry_number(entry, "restarts", name, source, whole=True)
            last = _entry_number(entry, "last_restart", name, source)
            healthy = _entry_number(entry, "healthy_since", name, source)
            if count:
                self._count[name] = int(count)
            if last is not None:
                self._last[name] = last
            if healthy is not None:
                self._healthy_since[name] = healthy


def _entry_number(entry: Mapping[str, Any], key: str, name: str, source: str, *, whole: bool = False) -> float | None:
    """``entry[key]``: a finite number not below 0 (a whole one for a count), or None when absent."""
    value = entry.get(key)
    if value is None:
        return 0 if whole else None
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    impossible = isinstance(number, float) and not math.isfinite(number)  # 1e400 reads as inf; NaN too
    if number is None or impossible or number < 0 or (whole and number != int(number)):
        kind = "a whole number" if whole else "a time in seconds"
        raise ConfigError(
            source, f"connectors.{name}.{key}", f"is {str(value)[:40]}, not {kind} of 0 or more",
            fix="delete the file (the restart counts start again from 0)",
        )  # fmt: skip
    return number


@dataclass(frozen=True)
class RestartStateFile:
    """The auto-restart state of one ``ikkai serve``, as JSON, replaced atomically on every change."""

    path: Path

    def load_into(self, backoff: RestartBackoff) -> RestartBackoff:
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(
                    str(self.path), "(file)", f"unreadable auto-restart state: {exc}", fix="delete it"
                ) from exc
            backoff.restore(data, str(self.path))
        return backoff

    def save(self, backoff: RestartBackoff) -> None:
        """Write ``<name>.partial`` afresh (never through a link or into a file found there), then rename it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (json.dumps(backoff.state(), indent=2, sort_keys=True) + "\n").encode()
        partial = self.path.with_name(self.path.name + ".partial")
        partial.unlink(missing_ok=True)  # a leftover, or a planted link: unlink removes the link, not its target
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(partial, flags, 0o600), "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, self.path)

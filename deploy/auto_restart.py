"""When to restart a failed connector again: capped exponential backoff per connector. Pure.

Strimzi's KafkaConnector auto-restart, outside Kubernetes: the first restart is immediate, the
(n+1)-th waits ``min(cap, base * 2**(n-1))`` after the n-th; once the connector has been
healthy for ``reset_after`` seconds the count starts again from zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RestartBackoff:
    base: float = 2.0
    cap: float = 300.0
    reset_after: float = 600.0
    _count: dict[str, int] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    _healthy_since: dict[str, float] = field(default_factory=dict)

    def delay(self, connector: str) -> float:
        """Seconds to wait after the previous restart: 0 before the first, then base, 2·base, … up to cap."""
        count = self._count.get(connector, 0)
        return 0.0 if count == 0 else min(self.cap, self.base * 2 ** (count - 1))

    def due(self, connector: str, now: float) -> bool:
        """True when a failed ``connector`` may be restarted at ``now``."""
        last = self._last.get(connector)
        return last is None or now - last >= self.delay(connector)

    def restarted(self, connector: str, now: float) -> None:
        self._last[connector] = now
        self._count[connector] = self._count.get(connector, 0) + 1
        self._healthy_since.pop(connector, None)

    def healthy(self, connector: str, now: float) -> None:
        since = self._healthy_since.setdefault(connector, now)
        if now - since >= self.reset_after:
            self._count.pop(connector, None)
            self._last.pop(connector, None)

    def restarts(self, connector: str) -> int:
        return self._count.get(connector, 0)

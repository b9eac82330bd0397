"""What a stack is doing and where it listens, in words the stack and the control plane share.

Every runtime (embedded, docker, external) reports a ``StackStatus``; ``embedded_endpoints`` finds
where the embedded stack of a home listens from its state file, without starting or asking anything,
so that ``deploy`` can resolve ``connect_url: local`` without the stack's lifecycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ikkai.settings import Endpoints
from stack.state import StackHome


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pids: list[int]
    healthy: bool
    log: Path

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "pids": self.pids, "healthy": self.healthy, "log": str(self.log)}


@dataclass(frozen=True)
class StackStatus:
    home: Path
    endpoints: Endpoints | None
    components: list[ComponentStatus] = field(default_factory=list)
    spark_master_url: str | None = None  # the embedded stack's Spark cluster, when it has one
    connect_urls: list[str] = field(default_factory=list)  # every Connect worker's, when there are several

    @property
    def running(self) -> bool:
        return bool(self.components) and all(c.healthy and len(c.pids) <= 1 for c in self.components)

    @property
    def stopped(self) -> bool:
        return all(not c.pids for c in self.components)

    def as_dict(self) -> dict[str, object]:
        return {
            "home": str(self.home),
            "state": "running" if self.running else "stopped" if self.stopped else "degraded",
            **(self.endpoints.as_dict() if self.endpoints else {"runtime": "local"}),
            **({"spark_master_url": self.spark_master_url} if self.spark_master_url else {}),
            **({"connect_urls": self.connect_urls} if self.connect_urls else {}),
            "components": [c.as_dict() for c in self.components],
        }


def embedded_endpoints(home: Path) -> Endpoints | None:
    """Where the embedded stack in ``home`` listens, as its state file says; None if it never started there."""
    state = StackHome(home.resolve())
    return state.endpoints(secure=bool(state.saved_secure()), registry=state.saved_registry())

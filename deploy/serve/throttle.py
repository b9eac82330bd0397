"""Wrong tokens per peer, for the page's login and the API's bearer header alike. Pure apart from its clock.

The peer is the address the connection comes from (uvicorn's ``scope["client"]``), or, only when
``ikkai serve --forwarded-allow-ips`` names the proxy it comes through, the client that proxy reports in
``X-Forwarded-For``; a header from anyone else changes nothing, so rotating it buys no more guesses.

After ``MAX_FAILURES`` wrong tokens within ``WINDOW_SECONDS`` a peer's next wrong tokens are answered 429
until its oldest counted failure is a window old. A right token is always heard, throttled peer or not:
every local user connects from 127.0.0.1, so a lockout keyed by address would let any of them lock the
operator out with five wrong guesses, and it would buy nothing against guessing, since a token carries at
least 128 bits (``deploy.serve.tokens``). What the throttle does buy: a guesser's 429s show in the metrics
and the audit log, and a script that respects ``Retry-After`` slows down. Memory is bounded by
``MAX_PEERS`` addresses, the least recently failing forgotten first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

MAX_FAILURES = 5  # wrong tokens from one peer ...
WINDOW_SECONDS = 60.0  # ... within this long, then that peer's wrong tokens get 429 until the window passes
MAX_PEERS = 10_000  # peers remembered; the oldest is forgotten first


class FailureThrottle:
    """Wrong tokens per peer in a sliding window (see the module's text)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        max_failures: int = MAX_FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        max_clients: int = MAX_PEERS,
    ) -> None:
        self.clock = clock
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self.max_clients = max_clients
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def wait_seconds(self, client: str) -> float:
        """How long ``client``'s wrong tokens are still answered 429; 0 when they are not."""
        with self._lock:
            recent = self._recent(client)
            if len(recent) < self.max_failures:
                return 0.0
            return max(0.0, recent[0] + self.window_seconds - self.clock())

    def failed(self, client: str) -> None:
        with self._lock:
            recent = self._recent(client)
            self._failures.pop(client, None)  # re-inserted last: the dict's order is the forgetting order
            self._failures[client] = [*recent, self.clock()][-self.max_failures :]
            while len(self._failures) > self.max_clients:
                del self._failures[next(iter(self._failures))]

    def _recent(self, client: str) -> list[float]:
        now = self.clock()
        return [at for at in self._failures.get(client, []) if now - at < self.window_seconds]


def peer(scope: Mapping[str, Any]) -> str:
    """The peer of an ASGI connection: its address (a trusted proxy's client, see the module's text)."""
    client = scope.get("client")
    return str(client[0]) if isinstance(client, (tuple, list)) and client else "unknown"

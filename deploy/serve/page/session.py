"""Who is logged in to the page, and the CSRF rule every action obeys. Pure over the session mapping.

The session lives in a cookie signed by Starlette's ``SessionMiddleware`` (itsdangerous), so the server keeps
no session table and a restart (a new signing key) logs everyone out. It holds the environments the login
token covers, never the token itself, and a synchronizer CSRF token: a random value made at login, written
into every form of the page, and compared (in constant time) with the form's copy on every POST. A page
from another site cannot read it, and with ``SameSite=Strict`` the browser does not even send the cookie
on a cross-site POST; either alone refuses a forged action, together they do not depend on each other.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from deploy.serve.tokens import EVERY

ENVIRONMENTS = "environments"
CSRF = "csrf"
CSRF_FIELD = "csrf"  # the form field that carries the copy


def log_in(session: MutableMapping[str, Any], environments: Iterable[str]) -> None:
    """A fresh session (nothing kept from before the login: no fixation) with a new CSRF token."""
    session.clear()
    session[ENVIRONMENTS] = sorted(environments)
    session[CSRF] = secrets.token_urlsafe(32)


def logged_in(session: MutableMapping[str, Any]) -> bool:
    return bool(session.get(ENVIRONMENTS)) and bool(session.get(CSRF))


def covers(session: MutableMapping[str, Any], env: str) -> bool:
    environments = session.get(ENVIRONMENTS) or []
    return EVERY in environments or env in environments


def csrf_ok(session: MutableMapping[str, Any], supplied: str | None) -> bool:
    """The form's CSRF copy is the session's: a logged-in session, and equal in constant time."""
    expected = session.get(CSRF)
    if not logged_in(session) or not isinstance(expected, str) or not supplied:
        return False
    return hmac.compare_digest(expected.encode(), supplied.encode())


MAX_FAILURES = 5  # failed logins from one address ...
WINDOW_SECONDS = 60.0  # ... within this long, then that address waits out the window
MAX_CLIENTS = 10_000  # addresses remembered; the oldest is forgotten first


class LoginThrottle:
    """Failed logins per client address: after ``MAX_FAILURES`` within ``WINDOW_SECONDS`` that address is refused
    (429) until its oldest counted failure is a window old. A token is at least 16 random characters, so guessing
    is hopeless anyway; this keeps a guesser from costing the server a comparison per token per request, and shows
    in the logs as 429s. Memory is bounded by ``MAX_CLIENTS`` addresses. Pure apart from the clock it is given."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        max_failures: int = MAX_FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.clock = clock
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self.max_clients = max_clients
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def wait_seconds(self, client: str) -> float:
        """How long ``client`` must wait before its next login attempt is heard; 0 when it may try now."""
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

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)

    def _recent(self, client: str) -> list[float]:
        now = self.clock()
        return [at for at in self._failures.get(client, []) if now - at < self.window_seconds]

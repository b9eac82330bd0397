"""Who is logged in to the page, and the CSRF rule every action obeys.

Sessions live in this process (``SessionStore``); the cookie holds only a random id, so it carries
nothing readable (no CSRF token, no environments), a logout or ``IDLE_SECONDS`` without a request ends it
for good, and a restart ends them all. Cookies ignore ports: a browser sends the cookie to every server on
127.0.0.1, and another local user's server that the operator visits receives the id; it is refused after
the logout or the idle time, and by any other server. A session holds the environments the login token
covers, never the token itself, who logged in (``WHO``: the token's short fingerprint) and a synchronizer
CSRF token: a random value made at login, written into every form of the page, and compared (in constant
time) with the form's copy on every POST. A page elsewhere cannot read it, and the server also refuses a
POST whose ``Origin`` is not its own (``deploy.serve.site``).
"""

from __future__ import annotations

import hashlib
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
WHO = "who"  # who logged in, for the audit log
APPLIER = "applier"  # who the page's applies are recorded as (login_fields.applier: the name typed at login)


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


IDLE_SECONDS = 30 * 60.0  # a session no request used for this long is over (an open view reloads itself)
MAX_SECONDS = 8 * 3600.0  # and any session after a working day
MAX_SESSIONS = 1_000  # sessions kept; beyond it the least recently used ends first


class SessionStore:
    """The page's sessions, in this process: a random id (the only thing the cookie holds) → its fields.

    ``get`` renews the idle time; ``end`` (the logout) removes the id, so a copy of the cookie replayed
    afterwards finds nothing; a restarted server has none. Ids are kept as their SHA-256, so looking one
    up compares no secret byte by byte. Pure apart from its clock."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        idle_seconds: float = IDLE_SECONDS,
        max_seconds: float = MAX_SECONDS,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.clock = clock
        self.idle_seconds = idle_seconds
        self.max_seconds = max_seconds
        self.max_sessions = max_sessions
        self._sessions: dict[str, tuple[float, float, dict[str, Any]]] = {}  # key → (made, last used, fields)
        self._lock = threading.Lock()

    def create(self, environments: Iterable[str], *, who: str, applier: str | None = None) -> str:
        """A new session logged in for ``environments`` with a new CSRF token; its id, for the cookie."""
        sid = secrets.token_urlsafe(32)
        fields: dict[str, Any] = {}
        log_in(fields, environments)
        fields[WHO] = who
        if applier is not None:
            fields[APPLIER] = applier
        now = self.clock()
        with self._lock:
            self._sessions[_key(sid)] = (now, now, fields)
            while len(self._sessions) > self.max_sessions:
                del self._sessions[next(iter(self._sessions))]
        return sid

    def get(self, sid: str | None) -> dict[str, Any] | None:
        """The session's fields (shared: changes stay), renewed; None when there is no such live session."""
        if not sid:
            return None
        key, now = _key(sid), self.clock()
        with self._lock:
            found = self._sessions.pop(key, None)
            if found is None:
                return None
            made, used, fields = found
            if now - used >= self.idle_seconds or now - made >= self.max_seconds:
                return None
            self._sessions[key] = (made, now, fields)  # last: the dict's order is the least recently used first
            return fields

    def end(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._sessions.pop(_key(sid), None)


def _key(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()

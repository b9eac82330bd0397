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
from collections.abc import Iterable, MutableMapping
from typing import Any

from deploy.serve_tokens import EVERY

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

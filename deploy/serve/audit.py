"""The audit log of ``ikkai serve``: one line for every login, failed login, logout and action.

Logger ``ikkai.serve.audit`` at INFO (``ikkai serve`` writes it to stderr): ``<what> who=… peer=… env=…``
and the action's own fields. ``who`` is the token's fingerprint (``token:`` and the first 12 hex digits of
its SHA-256: enough to tell the tokens of a token file apart, nothing to log in with; tokens carry no
names), ``peer`` the address the request came from (``deploy.serve.throttle.peer``), ``env`` the
environment acted on. Each value is cut to ``MAX_VALUE`` characters, URL credentials redacted, and
written JSON-quoted, so a connector name cannot start a line of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging

from ikkai.redaction import redact_urls

AUDIT = logging.getLogger("ikkai.serve.audit")
MAX_VALUE = 200
NOBODY = "-"  # who, when no token was accepted


def fingerprint(token: str) -> str:
    """Who a token is, in the audit log."""
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:12]


def audit(what: str, *, who: str, peer: str, env: str | None = None, **fields: object) -> None:
    """One line: ``what`` happened, by ``who`` from ``peer`` in ``env``, with ``fields``."""
    values = {"who": who, "peer": peer, "env": env or NOBODY, **fields}
    AUDIT.info("%s %s", what, " ".join(f"{name}={_shown(value)}" for name, value in values.items()))


def _shown(value: object) -> str:
    return json.dumps(redact_urls(str(value))[:MAX_VALUE])

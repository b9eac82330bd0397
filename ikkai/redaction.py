"""Credentials inside URLs, hidden wherever a URL is printed. Pure.

Key names mark most secrets (``connectors.secrets``); a URL can carry one under any key name:
``jdbc:postgresql://db/x?user=a&password=secret``, ``http://user:pass@host/``. This module is the
one rule for that, used by everything that prints a config value, a plan or an error with a URL in
it (bundle render and plan, the lint, the schema registry's errors). The outbox sink's Java applies
the same rule (``dev.ikkai.outbox.Urls``), where a URL ends only at white space (the sink writes no HTML).

A URL is a run of non-space text that starts with a scheme and ``://`` (``jdbc:postgresql://`` too)
and ends before a space, a ``"``, a ``<`` or a ``>`` (none of which a URL holds unencoded, so a URL in
HTML or in quotes ends where they start). Inside one, two things are credentials:

- the user info: everything between ``://`` and the last ``@`` before the first ``/``, ``?`` or ``#``
  (user and password alike; a user name is often a token);
- the value of a query or ``;`` parameter whose name, lower-cased and split on ``_``, ``-`` and ``.``,
  ends in a part that is one of ``SECRET_PARAMETERS`` (``password``, ``api_key``, ``X-Amz-Signature``,
  ``client.secret``), or ends with ``password``, ``passwd``, ``secret``, ``token`` or ``apikey``
  (``sslpassword``, ``accesstoken``).

A value that is one config-provider placeholder (``${file:/etc/db.properties:password}``) is a
reference, not a secret, and is kept. Oracle's ``jdbc:oracle:thin:user/password@host`` has no ``://``:
it is not recognised, and its password belongs in the connector's password key anyway.

Applied where text leaves a process (rule: one redaction at every exit), not only where a URL is
printed on purpose: ``redact_data`` for what is serialised (the CLI's ``-o json``, its error objects),
``RedactingFormatter`` for log lines (tracebacks included), and ``deploy.serve.outgoing`` for every
HTTP body ``ikkai serve`` sends (API, ``/healthz``, the page).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["REDACTED", "SECRET_PARAMETERS", "RedactingFormatter", "carries_url_credentials", "redact_data",
           "redact_urls"]  # fmt: skip

REDACTED: Final = "<redacted>"
# A parameter is secret when the last part of its name (split on _ - .) is one of these, case-insensitive.
SECRET_PARAMETERS: Final = frozenset({"password", "passwd", "pwd", "secret", "token", "apikey", "key",
                                      "sig", "signature", "credential", "credentials"})  # fmt: skip
_SECRET_ENDINGS: Final = ("password", "passwd", "secret", "token", "apikey")
_PLACEHOLDER: Final = r"\$\{[^}]*\}"  # Kafka's ${provider:[path:]key}: a reference the worker resolves
_URL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.:-]*://[^\s\"<>]*")
_USER_INFO: Final = re.compile(rf"^(?P<scheme>[^/]*://)(?P<info>(?:{_PLACEHOLDER}|[^/?#\s])*)@")
_PARAMETER: Final = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;#?/\s]+)=(?P<value>[^&;#\s\"<>]*)")
_ONLY_PLACEHOLDERS: Final = re.compile(rf"^(?:{_PLACEHOLDER}|:)*$")


def redact_urls(text: str, marker: str = REDACTED) -> str:
    """``text`` with the credentials of every URL in it replaced by ``marker``; the rest as it was.

    ``marker`` is ``REDACTED``, or its escaped form in HTML (``&lt;redacted&gt;``, shown as ``<redacted>``)."""
    return _URL.sub(lambda match: _redact_url(match.group(), marker), text) if "://" in text else text


def carries_url_credentials(text: str) -> bool:
    """True when a URL in ``text`` holds a literal credential (user info or a secret parameter)."""
    return redact_urls(text) != text


def redact_data(value: Any) -> Any:
    """``value`` (JSON-like: mappings, lists, tuples, strings, numbers) with ``redact_urls`` applied to every
    string in it, keys included; numbers, booleans and None as they were."""
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, Mapping):
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


class RedactingFormatter(logging.Formatter):
    """A log line as ``logging.Formatter`` makes it (message, then any traceback), with URL credentials redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls(super().format(record))


def _redact_url(url: str, marker: str) -> str:
    url = _PARAMETER.sub(lambda match: _redact_parameter(match, marker), url)
    info = _USER_INFO.match(url)
    if info is None or _ONLY_PLACEHOLDERS.match(info.group("info")):
        return url
    return f"{info.group('scheme')}{marker}@{url[info.end() :]}"


def _redact_parameter(match: re.Match[str], marker: str) -> str:
    value = match.group("value")
    if not value or re.fullmatch(_PLACEHOLDER, value) or not _is_secret(match.group("name")):
        return match.group()
    return f"{match.group('lead')}{match.group('name')}={marker}"


def _is_secret(name: str) -> bool:
    last = re.split(r"[_.-]", name.lower())[-1]
    return last in SECRET_PARAMETERS or last.endswith(_SECRET_ENDINGS)

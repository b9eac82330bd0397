"""Which config keys hold secrets, whether a value is a config-provider placeholder, and redaction.

A secret belongs in a file, directory or environment variable the Connect worker reads
through a config provider; the connector config (and so Connect's config topic) holds only
the reference, e.g. ``${file:/etc/ikkai/db.properties:password}``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

REDACTED = "<redacted>"
PLACEHOLDER = re.compile(r"^\$\{(file|dir|env):[^}]+\}$")
_SECRET_WORDS = ("password", "passwd", "secret", "token", "jaas", "credential")
_SECRET_KEY_SUFFIXES = ("api.key", "apikey", "access.key", "private.key", "secret.key", "ssl.key", "key.id")


def is_placeholder(value: str) -> bool:
    """True when the whole value is one config-provider reference (file, dir or env)."""
    return bool(PLACEHOLDER.match(value.strip()))


def named_like_secret(key: str) -> bool:
    lowered = key.lower()
    if any(word in lowered for word in _SECRET_WORDS):
        return True
    return lowered.endswith(_SECRET_KEY_SUFFIXES) or (
        lowered.rsplit(".", 1)[-1] in {"key", "apikey"}
        and not (lowered.startswith(("key.", "transforms.", "predicates.")) or ".key.converter" in lowered)
    )


def secret_keys(config: Mapping[str, str], password_keys: Collection[str] = ()) -> set[str]:
    """Keys of ``config`` that hold secrets: PASSWORD-typed for the plugin, or named like one."""
    return {k for k in config if k in password_keys or named_like_secret(k)}


def redact(config: Mapping[str, str], password_keys: Collection[str] = ()) -> dict[str, str]:
    """A copy safe to print: secret values replaced, placeholders kept (they are references, not secrets)."""
    hidden = secret_keys(config, password_keys)
    return {k: (v if k not in hidden or is_placeholder(v) or v == "" else REDACTED) for k, v in config.items()}


def redact_value(key: str, value: str | None, password_keys: Collection[str] = ()) -> str | None:
    if value is None:
        return None
    return redact({key: value}, password_keys)[key]

"""Which config keys hold secrets, whether a value is a config-provider placeholder, and redaction.

A secret belongs where the Connect worker reads it through a config provider: a file, a directory,
an environment variable, a Kubernetes Secret (Strimzi's ``KubernetesSecretConfigProvider``) or a
vault. The connector config (and so Connect's config topic) holds only the reference, in Kafka's
``${provider:[path:]key}`` form, e.g.:

- ``${file:/etc/ikkai/db.properties:password}`` (``FileConfigProvider``)
- ``${dir:/run/secrets:db-password}`` (``DirectoryConfigProvider``)
- ``${env:DB_PASSWORD}`` (``EnvVarConfigProvider``)
- ``${secrets:kafka/postgres-cdc:password}`` (Strimzi's ``KubernetesSecretConfigProvider``: namespace/secret:key)
- ``${vault:secret/data/ikkai/db:password}`` (a Vault provider)

The provider name is whatever the worker's ``config.providers`` calls it, so which names a bundle
may use is configured per environment: the value ``config_providers`` (platform default: the
embedded worker's ``file``, ``dir`` and ``env``; a Strimzi environment sets e.g. ``[secrets, env]``).

A value under any key may be a URL with a credential inside (``jdbc:postgresql://db/x?password=…``,
``http://user:pass@host``): ``redact`` hides those too, by the one rule of ``ikkai.redaction``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from ikkai.redaction import REDACTED, redact_urls

__all__ = [
    "DEFAULT_PROVIDERS", "PLACEHOLDER", "REDACTED", "is_placeholder", "named_like_secret", "parse_providers",
    "placeholder_provider", "redact", "redact_value", "secret_keys",
]  # fmt: skip

# What Kafka's ConfigTransformer resolves: ${provider:[path:]key}; here the whole value is one reference.
PLACEHOLDER = re.compile(r"^\$\{(?P<provider>[A-Za-z][A-Za-z0-9_.-]*):(?:(?P<path>[^}]*?):)?(?P<key>[^}:]+)\}$")
# The config providers the embedded stack's worker has (stack/stack_config.py): the default of ``config_providers``.
DEFAULT_PROVIDERS = ("file", "dir", "env")
_PROVIDER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_SECRET_WORDS = ("password", "passwd", "secret", "token", "jaas", "credential")
# "user.info": basic.auth.user.info, the user:password of Confluent's schema registry clients.
_SECRET_KEY_SUFFIXES = ("api.key", "apikey", "access.key", "private.key", "secret.key", "ssl.key", "key.id",
                        "user.info")  # fmt: skip


def placeholder_provider(value: str) -> str | None:
    """The provider name when the whole value is one config-provider reference, else None."""
    match = PLACEHOLDER.match(value.strip())
    return match.group("provider") if match else None


def is_placeholder(value: str, providers: Collection[str] | None = None) -> bool:
    """True when the whole value is one config-provider reference; with ``providers``, to one of those."""
    provider = placeholder_provider(value)
    return provider is not None and (providers is None or provider in providers)


def parse_providers(value: Any) -> tuple[str, ...] | None:
    """The ``config_providers`` value as provider names, or None when it is not a list of names."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not value:
        return None
    names = tuple(str(name) for name in value)
    return names if all(isinstance(n, str) and _PROVIDER_NAME.match(n) for n in value) else None


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
    """A copy safe to print: secret values replaced, credentials inside URLs replaced, placeholders kept
    (they are references, not secrets)."""
    hidden = secret_keys(config, password_keys)
    return {
        k: (REDACTED if k in hidden and not (is_placeholder(v) or v == "") else redact_urls(v))
        for k, v in config.items()
    }


def redact_value(key: str, value: str | None, password_keys: Collection[str] = ()) -> str | None:
    if value is None:
        return None
    return redact({key: value}, password_keys)[key]

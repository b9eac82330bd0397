"""Which wire format an environment's values travel in, read once from its environment.

| variable                     | meaning                                                        | default            |
|------------------------------|----------------------------------------------------------------|--------------------|
| IKKAI_SCHEMA_REGISTRY_URL    | write the Confluent wire format against this registry (its     | (unset: Avro       |
|                              | Confluent-compatible API; several URLs comma-separated)        | single-object)     |
| IKKAI_SCHEMA_REGISTRY_CONFIG | the registry client's credentials and TLS: a ``.properties``   | (unset: none)      |
|                              | file of confluent-kafka ``SchemaRegistryClient`` keys          |                    |

``environment_codec`` is the one switch: every ikkai writer and reader of values (the outbox
emitter, the receipts reader, the enrich and infer jobs, master data) takes its codec from it.
Unset, it is the catalog's single-object codec, byte for byte what ikkai wrote before registries
existed; set, a ``RegistryCodec`` (``ikkai.contract.registry``), which also reads single-object
records, so a topic can switch formats without losing its history. Commit markers are the
exception: they are the jobs' own bookkeeping, always single-object.

The config file takes the client's own keys (``basic.auth.user.info``, ``ssl.ca.location``,
``bearer.auth.*``, ...) plus the serializers' ``auto.register.schemas=false`` for writers that
may only look schemas up. Secrets stay in the file; ``RegistrySettings`` masks them in its repr.
The URL must not carry credentials (it is printed): they go into ``basic.auth.user.info``. A URL is
printed with credentials redacted all the same (``ikkai.redaction``), in errors and in the repr.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from ikkai.contract.codec import RecordCodec, default_codec
from ikkai.contract.kafka_security import read_properties
from ikkai.errors import ConfigError
from ikkai.redaction import redact_urls

URL_VAR: Final = "IKKAI_SCHEMA_REGISTRY_URL"
CONFIG_VAR: Final = "IKKAI_SCHEMA_REGISTRY_CONFIG"
AUTO_REGISTER: Final = "auto.register.schemas"  # the name Confluent's serializers give it

SECRET_KEYS: Final = frozenset({"basic.auth.user.info", "bearer.auth.token", "bearer.auth.client.secret",
                                "ssl.key.password"})  # fmt: skip
_NUMBERS: Final = {"timeout": float, "cache.capacity": int, "cache.latest.ttl.sec": float, "max.retries": int,
                   "retries.wait.ms": int, "retries.max.wait.ms": int}  # fmt: skip
CLIENT_KEYS: Final = frozenset({
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password", "basic.auth.user.info",
    "bearer.auth.credentials.source", "bearer.auth.token", "bearer.auth.logical.cluster",
    "bearer.auth.identity.pool.id", "bearer.auth.client.id", "bearer.auth.client.secret", "bearer.auth.scope",
    "bearer.auth.issuer.endpoint.url", "proxy", *_NUMBERS,
})  # fmt: skip
BEARER_SOURCES: Final = ("STATIC_TOKEN", "OAUTHBEARER", "OAUTHBEARER_AZURE_IMDS")


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to reach it: ``SchemaRegistryClient`` settings, and where they came from."""

    url: str
    client: Mapping[str, Any] = field(default_factory=dict)  # without url
    auto_register: bool = True
    source: str = URL_VAR

    def __repr__(self) -> str:
        shown = {k: ("****" if k in SECRET_KEYS else v) for k, v in sorted(self.client.items())}
        url = redact_urls(self.url)
        return f"RegistrySettings({url}, {shown}, auto_register={self.auto_register}, from {self.source})"

    __str__ = __repr__

    def client_conf(self) -> dict[str, Any]:
        """What ``SchemaRegistryClient`` (and so ``RegistryCodec``) takes."""
        return {"url": self.url, **self.client}


def check_url(url: str, where: str = URL_VAR) -> str:
    """``url`` (comma-separated URLs) if each is an http(s) URL with a host and no credentials; without trailing /."""
    urls = [part.strip().rstrip("/") for part in url.split(",")]
    for one in urls:
        parts = urlsplit(one)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            shown = repr(redact_urls(one)) if "://" in one or "@" not in one else "a value with user info"
            raise ConfigError("environment", where, f"{shown} is not an http(s) URL",
                              fix="name the registry's Confluent-compatible API, e.g. http://registry:8081 "
                              "(Apicurio: http://host:port/apis/ccompat/v7)")  # fmt: skip
        if parts.username or parts.password:
            raise ConfigError("environment", where, "the URL carries credentials",
                              fix=f"remove them from the URL and write basic.auth.user.info=<user>:<password> "
                              f"into the file {CONFIG_VAR} names")  # fmt: skip
    return ",".join(urls)


def load_client_settings(path: Path) -> tuple[dict[str, Any], bool]:
    """The client settings of a registry config file, checked; and whether writers may register schemas."""
    where = str(path)
    if not path.is_file():
        raise ConfigError("schema registry config", where, "no such file", fix=f"check {CONFIG_VAR}")
    try:
        properties = read_properties(path)
    except ConfigError as exc:
        raise ConfigError("schema registry config", where, exc.problem, fix=f"check {CONFIG_VAR}") from exc
    if "url" in properties:
        raise ConfigError("schema registry config", where, "names url",
                          fix=f"the registry's URL is {URL_VAR} alone: remove url from the file")  # fmt: skip
    unknown = sorted(set(properties) - CLIENT_KEYS - {AUTO_REGISTER})
    if unknown:
        raise ConfigError("schema registry config", where, f"unknown key(s) {', '.join(unknown)}",
                          fix=f"use confluent-kafka SchemaRegistryClient keys: {', '.join(sorted(CLIENT_KEYS))}, "
                          f"or {AUTO_REGISTER}")  # fmt: skip
    auto_register = properties.pop(AUTO_REGISTER, "true").strip().lower()
    if auto_register not in ("true", "false"):
        raise ConfigError("schema registry config", where, f"{AUTO_REGISTER}={auto_register}",
                          fix="write true or false")  # fmt: skip
    client: dict[str, Any] = {}
    for key, value in properties.items():
        if key in _NUMBERS:
            try:
                client[key] = _NUMBERS[key](value)
            except ValueError:
                raise ConfigError("schema registry config", where, f"{key}={value!r} is not a number",
                                  fix=f"write {key} as a number") from None  # fmt: skip
        else:
            client[key] = value
    source = client.get("bearer.auth.credentials.source")
    if source is not None and source not in BEARER_SOURCES:
        raise ConfigError("schema registry config", where, f"bearer.auth.credentials.source={source}",
                          fix=f"use one of {', '.join(BEARER_SOURCES)}")  # fmt: skip
    user_info = client.get("basic.auth.user.info")
    if user_info is not None and ":" not in user_info:
        raise ConfigError("schema registry config", where, "basic.auth.user.info is not <user>:<password>",
                          fix="write basic.auth.user.info=<user>:<password>")  # fmt: skip
    if ("ssl.key.location" in client or "ssl.key.password" in client) and "ssl.certificate.location" not in client:
        raise ConfigError("schema registry config", where, "a client key without ssl.certificate.location",
                          fix="name the client certificate (PEM) in ssl.certificate.location")  # fmt: skip
    return client, auto_register == "true"


def registry_settings(env: Mapping[str, str] = os.environ) -> RegistrySettings | None:
    """The registry the environment names, or None: values travel as Avro single-object records."""
    url = env.get(URL_VAR, "").strip()
    config = env.get(CONFIG_VAR, "").strip()
    if not url:
        if config:
            raise ConfigError("environment", CONFIG_VAR, f"is set ({config}) while {URL_VAR} is unset",
                              fix=f"set {URL_VAR} to the registry's URL, or unset {CONFIG_VAR}")  # fmt: skip
        return None
    if not config:
        return RegistrySettings(check_url(url))
    client, auto_register = load_client_settings(Path(config))
    return RegistrySettings(check_url(url), client, auto_register, source=f"{URL_VAR} and {config}")


def environment_codec(env: Mapping[str, str] = os.environ) -> RecordCodec:
    """The codec every ikkai writer and reader of values uses in this environment (one per setting, per process).

    Callers pick it once (the Spark jobs on the driver, then ship it: both codecs pickle) and keep it.
    """
    return _codec(env.get(URL_VAR, "").strip(), env.get(CONFIG_VAR, "").strip())


@lru_cache(maxsize=8)
def _codec(url: str, config: str) -> RecordCodec:
    settings = registry_settings({URL_VAR: url, CONFIG_VAR: config})
    if settings is None:
        return default_codec()
    try:  # the registry extra: imported only where a registry is named
        from ikkai.contract.registry import codec_for
    except ImportError as exc:
        raise ConfigError("environment", URL_VAR, f"is set, but the schema registry client cannot load: {exc}",
                          fix="pip install 'ikkai[registry]'") from exc  # fmt: skip
    return codec_for(default_codec().catalog, settings.client_conf(), auto_register=settings.auto_register)

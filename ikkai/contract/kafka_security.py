"""How every ikkai client authenticates to Kafka and encrypts: one client-properties file, Kafka's own keys.

A Kafka user already has such a file (the one ``kafka-console-producer --command-config`` takes):

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="ikkai" password="...";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/ikkai/ca.pem

``IKKAI_KAFKA_CONFIG`` names it; every client ikkai builds reads it: the Spark jobs' Kafka source
and sink take the keys as they are (``kafka.<key>`` options, Java clients), and the Python clients
(the jobs' transactional sink, the emitter, the receipts reader, admin clients) take them
translated to librdkafka's names by ``librdkafka_settings``. Secrets stay in the file: never on a
command line, never in a log line (``SecurityConfig`` masks them in its repr).

librdkafka reads certificates as PEM (or a PKCS#12 keystore), not Java keystores, so the one file
that serves both kinds of client names a PEM truststore (``ssl.truststore.type=PEM``, which Java
clients read too). A key ikkai does not know is refused with the keys it does, never passed on blind.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from ikkai.errors import ConfigError

CONFIG_VAR: Final = "IKKAI_KAFKA_CONFIG"

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SECRET_KEYS: Final = frozenset({
    "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
})  # fmt: skip
KNOWN_KEYS: Final = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "sasl.oauthbearer.token.endpoint.url", "sasl.login.callback.handler.class", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
})  # fmt: skip
_JAAS_OPTION = re.compile(r'([A-Za-z_][\w.]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class SecurityConfig:
    """Kafka client settings in Kafka's (Java client) names, and where they came from."""

    properties: Mapping[str, str] = field(default_factory=dict)
    source: str = "<none>"
    file: str = ""  # the file they were read from ("": built in memory)

    def __reduce__(self) -> str | tuple[Any, ...]:
        """Read from a file, they are pickled (into Spark tasks) as that file's path, read again where they
        arrive, so no secret travels inside a task; built in memory, as they are."""
        if self.file:
            return (load_security, (Path(self.file),))
        return (SecurityConfig, (dict(self.properties), self.source))

    def __repr__(self) -> str:
        shown = {k: ("****" if k in SECRET_KEYS else v) for k, v in sorted(self.properties.items())}
        return f"SecurityConfig({self.source}: {shown})"

    __str__ = __repr__

    @property
    def protocol(self) -> str:
        return self.properties.get("security.protocol", "PLAINTEXT")

    def user(self) -> str | None:
        """The SASL user name (PLAIN, SCRAM) or OAuth client id, for messages; never the secret."""
        options = jaas_options(self.properties.get("sasl.jaas.config", ""))
        return options.get("username") or options.get("clientId")

    def describe(self) -> str:
        """``SASL_SSL, SCRAM-SHA-512 as 'ikkai' (from /etc/ikkai/client.properties)`` — safe to print."""
        parts = [self.protocol]
        if self.protocol.startswith("SASL"):
            mechanism = self.properties.get("sasl.mechanism", "GSSAPI")
            user = self.user()
            parts.append(f"{mechanism} as {user!r}" if user else mechanism)
        return f"{', '.join(parts)} (from {self.source})"

    # Derived once per configuration, where the cluster is resolved, not again for every client built with it. Never
    # pickled (``__reduce__`` carries the file's path): a task derives them again from the file where it runs.
    @cached_property
    def librdkafka(self) -> Mapping[str, str]:
        """``librdkafka_settings``: the Python clients' settings (producers, consumers, admin clients)."""
        return MappingProxyType(librdkafka_settings(self))

    @cached_property
    def spark(self) -> Mapping[str, str]:
        """``spark_kafka_options``: Spark's Kafka source and sink options."""
        return MappingProxyType(spark_kafka_options(self))


NO_SECURITY: Final = SecurityConfig()


def read_properties(path: Path) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` continuations."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "kafka client config", str(path), f"cannot be read: {exc.strerror}", fix=f"check {CONFIG_VAR}"
        ) from exc
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line.startswith(("#", "!"))):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    properties: dict[str, str] = {}
    for line in logical:
        match = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line)
        key, value = (match.group(1), match.group(2)) if match else (line, "")
        properties[_unescape(key)] = _unescape(value.rstrip())
    return properties


def _unescape(text: str) -> str:
    escapes = {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), text)


def jaas_options(jaas: str) -> dict[str, str]:
    """The ``key="value"`` options of a one-module ``sasl.jaas.config`` line."""
    return {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}


def load_security(path: Path) -> SecurityConfig:
    """The file's settings, checked: known keys, a known protocol and mechanism, what each needs."""
    properties = read_properties(path)
    where = str(path)
    unknown = sorted(set(properties) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            "kafka client config", where, f"unknown key(s) {', '.join(unknown)}",
            fix=f"ikkai reads only client security settings: {', '.join(sorted(KNOWN_KEYS))}",
        )  # fmt: skip
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError("kafka client config", where, f"security.protocol={protocol}",
                          fix=f"use one of {', '.join(PROTOCOLS)}")  # fmt: skip
    properties["security.protocol"] = protocol
    if protocol.startswith("SASL"):
        mechanism = properties.get("sasl.mechanism", "")
        if mechanism not in MECHANISMS:
            raise ConfigError("kafka client config", where, f"sasl.mechanism={mechanism or '(unset)'}",
                              fix=f"use one of {', '.join(MECHANISMS)}")  # fmt: skip
        options = jaas_options(properties.get("sasl.jaas.config", ""))
        needs = ("clientId", "clientSecret") if mechanism == "OAUTHBEARER" else ("username", "password")
        missing = [name for name in needs if name not in options]
        if missing:
            raise ConfigError(
                "kafka client config", where, f"sasl.jaas.config lacks {' and '.join(missing)} for {mechanism}",
                fix=f'write it as <LoginModule> required {needs[0]}="..." {needs[1]}="...";',
            )  # fmt: skip
        if mechanism == "OAUTHBEARER" and "sasl.oauthbearer.token.endpoint.url" not in properties:
            raise ConfigError("kafka client config", where, "OAUTHBEARER without sasl.oauthbearer.token.endpoint.url",
                              fix="name the OAuth token endpoint (client credentials grant)")  # fmt: skip
    allowed = {"truststore": ("PEM",), "keystore": ("PEM", "PKCS12")}  # what librdkafka can read too
    for kind, types in allowed.items():
        store_type = properties.get(f"ssl.{kind}.type", "JKS").upper()  # Java clients' default type
        if f"ssl.{kind}.location" in properties and store_type not in types:
            raise ConfigError(
                "kafka client config", where, f"ssl.{kind}.type={store_type}",
                fix=f"ikkai's Python clients (librdkafka) read a {kind} as {' or '.join(types)}: set "
                f"ssl.{kind}.type=PEM and point ssl.{kind}.location at a PEM file "
                f"(keytool -exportcert -rfc, or openssl pkcs12 -nodes)",
            )  # fmt: skip
    return SecurityConfig(properties, where, file=where)


def client_security(env: Mapping[str, str] = os.environ) -> SecurityConfig:
    """The settings of the file ``IKKAI_KAFKA_CONFIG`` names, or none (PLAINTEXT) when it is unset."""
    path = env.get(CONFIG_VAR, "").strip()
    return load_security(Path(path)) if path else NO_SECURITY


def librdkafka_settings(security: SecurityConfig) -> dict[str, str]:
    """The same settings in librdkafka's names (confluent-kafka's Producer, Consumer, AdminClient)."""
    p = security.properties
    out: dict[str, str] = {}
    if "security.protocol" in p:
        out["security.protocol"] = p["security.protocol"]
    if "client.id" in p:
        out["client.id"] = p["client.id"]
    mechanism = p.get("sasl.mechanism")
    if security.protocol.startswith("SASL") and mechanism:
        out["sasl.mechanism"] = mechanism
        options = jaas_options(p.get("sasl.jaas.config", ""))
        if mechanism == "OAUTHBEARER":
            out["sasl.oauthbearer.method"] = "oidc"
            out["sasl.oauthbearer.client.id"] = options["clientId"]
            out["sasl.oauthbearer.client.secret"] = options["clientSecret"]
            out["sasl.oauthbearer.token.endpoint.url"] = p["sasl.oauthbearer.token.endpoint.url"]
            if "scope" in options:
                out["sasl.oauthbearer.scope"] = options["scope"]
        else:
            out["sasl.username"], out["sasl.password"] = options["username"], options["password"]
    if "ssl.truststore.location" in p:
        out["ssl.ca.location"] = p["ssl.truststore.location"]
    if "ssl.truststore.certificates" in p:
        out["ssl.ca.pem"] = p["ssl.truststore.certificates"]
    if "ssl.keystore.location" in p:
        if p.get("ssl.keystore.type", "").upper() == "PKCS12":
            out["ssl.keystore.location"] = p["ssl.keystore.location"]
            if "ssl.keystore.password" in p:
                out["ssl.keystore.password"] = p["ssl.keystore.password"]
        else:  # PEM: the private key and the certificate chain in one file
            out["ssl.certificate.location"] = out["ssl.key.location"] = p["ssl.keystore.location"]
    if "ssl.keystore.certificate.chain" in p:
        out["ssl.certificate.pem"] = p["ssl.keystore.certificate.chain"]
    if "ssl.keystore.key" in p:
        out["ssl.key.pem"] = p["ssl.keystore.key"]
    if "ssl.key.password" in p:
        out["ssl.key.password"] = p["ssl.key.password"]
    if "ssl.endpoint.identification.algorithm" in p:
        out["ssl.endpoint.identification.algorithm"] = p["ssl.endpoint.identification.algorithm"] or "none"
    return out


def java_client_settings(security: SecurityConfig) -> dict[str, str]:
    """The settings for Java clients (Kafka Connect workers, Spark's Kafka source and sink), as written."""
    return {k: v for k, v in security.properties.items() if k != "bootstrap.servers"}


def spark_kafka_options(security: SecurityConfig) -> dict[str, str]:
    """``kafka.<key>`` options for Spark's Kafka source and sink (Spark redacts sasl.jaas.config in its logs)."""
    return {f"kafka.{k}": v for k, v in java_client_settings(security).items()}

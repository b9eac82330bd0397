"""Where the stack lives and which cluster to use, read once from the environment.

| variable                     | meaning                                                   | default            |
|------------------------------|-----------------------------------------------------------|--------------------|
| IKKAI_HOME                   | state of the embedded stack (data, logs, pids)            | ~/.ikkai           |
| IKKAI_JARS_DIR               | jars resolved from stack/pom.xml, shared by every home    | $IKKAI_HOME/jars   |
| IKKAI_BOOTSTRAP_SERVERS      | use this Kafka cluster instead of starting one            | (unset)            |
| IKKAI_CONNECT_URL            | use this Kafka Connect REST URL instead of starting one   | (unset)            |
| IKKAI_KAFKA_CONFIG           | Kafka client properties: authentication and TLS (see      | (unset: PLAINTEXT) |
|                              | ``ikkai.contract.kafka_security``)                        |                    |
| IKKAI_CONNECT_CREDENTIALS    | JSON file: the Connect REST user, password and CA         | (unset)            |
| IKKAI_SCHEMA_REGISTRY_URL    | values in the Confluent wire format against this registry | (unset: Avro       |
|                              | (see ``ikkai.contract.wire_format``)                      | single-object)     |
| IKKAI_SCHEMA_REGISTRY_CONFIG | the registry client's credentials and TLS (properties)    | (unset)            |

The two cluster variables go together: naming one without the other is an error, because
half an external stack and half an embedded one would silently talk past each other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ikkai.errors import ConfigError

HOME_VAR = "IKKAI_HOME"
JARS_VAR = "IKKAI_JARS_DIR"
BOOTSTRAP_VAR = "IKKAI_BOOTSTRAP_SERVERS"
CONNECT_VAR = "IKKAI_CONNECT_URL"
KAFKA_CONFIG_VAR = "IKKAI_KAFKA_CONFIG"  # read by ikkai.contract.kafka_security
CONNECT_CREDENTIALS_VAR = "IKKAI_CONNECT_CREDENTIALS"
SCHEMA_REGISTRY_URL_VAR = "IKKAI_SCHEMA_REGISTRY_URL"  # read by ikkai.contract.wire_format (environment_codec)
STACK_STATE = "stack.json"  # in an embedded stack's home: its ports and, for clients, its endpoints
SPARK_JARS = "spark-jars.txt"  # in the jars folder: the Spark Kafka connector jars `ikkai setup` resolved last


def ikkai_home(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get(HOME_VAR) or Path.home() / ".ikkai").expanduser().resolve()


def jars_dir(env: Mapping[str, str] = os.environ) -> Path:
    configured = env.get(JARS_VAR)
    return Path(configured).expanduser().resolve() if configured else ikkai_home(env) / "jars"


def recorded_spark_jars(jars: Path) -> list[Path] | None:
    """The Spark connector jars ``ikkai setup`` recorded in ``jars``, or None if there are none or one is gone.

    For the Spark jobs, which must not import the runtime that resolves jars with Maven: the
    resolver writes one absolute path per line into ``<jars_dir>/spark-jars.txt``.
    """
    try:
        paths = [Path(line) for line in (jars / SPARK_JARS).read_text().splitlines() if line.strip()]
    except OSError:
        return None
    return paths if paths and all(path.is_file() for path in paths) else None


@dataclass(frozen=True)
class Endpoints:
    """How clients reach a running stack, whoever started it."""

    bootstrap_servers: str
    connect_url: str
    runtime: str  # "local", "docker" or "external"
    kafka_config: str = ""  # the client-properties file clients authenticate with ("": PLAINTEXT)
    connect_credentials: str = ""  # the Connect REST credentials file ("": none)
    schema_registry_url: str = ""  # the stack's schema registry, Confluent-compatible API ("": none)

    def as_dict(self) -> dict[str, str]:
        data = {
            "runtime": self.runtime,
            "bootstrap_servers": self.bootstrap_servers,
            "connect_url": self.connect_url,
        }
        if self.kafka_config:
            data["kafka_config"] = self.kafka_config
        if self.connect_credentials:
            data["connect_credentials"] = self.connect_credentials
        if self.schema_registry_url:
            data["schema_registry_url"] = self.schema_registry_url
        return data


@dataclass(frozen=True)
class ConnectAuth:
    """How to call a Connect REST API: basic-auth user and password, the CA that signed its certificate."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca: str | None = None
    client_cert: str | None = None  # a PEM file holding the client's key and certificate

    def requests_options(self) -> dict[str, object]:
        """``auth``/``verify``/``cert`` for ``requests``; the system CAs when no CA is named."""
        options: dict[str, object] = {"verify": self.ca or True}
        if self.username is not None:
            options["auth"] = (self.username, self.password or "")
        if self.client_cert:
            options["cert"] = self.client_cert
        return options


def connect_auth(path: str | Path | None) -> ConnectAuth:
    """The Connect REST credentials file (``{"username", "password", "ca", "client_cert"}``, all optional)."""
    if not path:
        return ConnectAuth()
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("connect credentials", str(path), f"cannot be read as JSON: {exc}",
                          fix=f"check {CONNECT_CREDENTIALS_VAR} or the clusters file") from exc  # fmt: skip
    unknown = (
        sorted(set(document) - {"username", "password", "ca", "client_cert"}) if isinstance(document, dict) else []
    )
    if not isinstance(document, dict) or unknown:
        raise ConfigError("connect credentials", str(path), f"unknown key(s) {', '.join(unknown) or '(not an object)'}",
                          fix='write {"username": ..., "password": ..., "ca": "<PEM file>"}')  # fmt: skip
    return ConnectAuth(document.get("username"), document.get("password"), document.get("ca"),
                       document.get("client_cert"))  # fmt: skip


def endpoints_connect_auth(endpoints: Endpoints, env: Mapping[str, str] = os.environ) -> ConnectAuth:
    """The credentials for ``endpoints``' Connect: its own file, else ``IKKAI_CONNECT_CREDENTIALS``."""
    return connect_auth(endpoints.connect_credentials or env.get(CONNECT_CREDENTIALS_VAR, "").strip() or None)


def external_endpoints(env: Mapping[str, str] = os.environ) -> Endpoints | None:
    """The existing cluster named by the environment, or None when the stack is ours to start."""
    bootstrap = env.get(BOOTSTRAP_VAR, "").strip()
    connect = env.get(CONNECT_VAR, "").strip()
    if not bootstrap and not connect:
        return None
    if not bootstrap or not connect:
        missing, given = (BOOTSTRAP_VAR, CONNECT_VAR) if not bootstrap else (CONNECT_VAR, BOOTSTRAP_VAR)
        raise ConfigError(
            "environment",
            missing,
            f"is unset while {given} is set",
            fix=f"set both to use an existing cluster, or unset {given} to start the embedded stack",
        )
    if not connect.startswith(("http://", "https://")):
        raise ConfigError(
            "environment", CONNECT_VAR, f"{connect!r} is not an http(s) URL", fix="e.g. http://connect:8083"
        )
    return Endpoints(
        bootstrap_servers=bootstrap, connect_url=connect.rstrip("/"), runtime="external",
        kafka_config=env.get(KAFKA_CONFIG_VAR, "").strip(),
        connect_credentials=env.get(CONNECT_CREDENTIALS_VAR, "").strip(),
        schema_registry_url=env.get(SCHEMA_REGISTRY_URL_VAR, "").strip(),
    )  # fmt: skip


def recorded_endpoints(home: Path) -> Endpoints | None:
    """The endpoints the embedded stack in ``home`` recorded when it started, or None if it never did.

    For clients that must not import the runtime that starts the stack (the Spark jobs): the
    stack writes them into ``<home>/stack.json``; whether it still runs is for the client to find.
    """
    try:
        recorded = json.loads((home / STACK_STATE).read_text()).get("endpoints")
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or not {"bootstrap_servers", "connect_url"} <= recorded.keys():
        return None
    return Endpoints(recorded["bootstrap_servers"], recorded["connect_url"], runtime="local",
                     kafka_config=recorded.get("kafka_config", ""),
                     connect_credentials=recorded.get("connect_credentials", ""),
                     schema_registry_url=recorded.get("schema_registry_url", ""))  # fmt: skip

"""Which Kafka Connect and Kafka cluster an environment's bundles go to: a small YAML file, typed and strict.

The default file is ``connectors/clusters.yaml``; ``--clusters`` or ``$IKKAI_CLUSTERS`` name
another. ``connect_url: local`` means ``$IKKAI_CONNECT_URL`` when set, else the embedded stack.
``credentials`` names a JSON file with the REST API's basic-auth user and password, the CA of its
certificate and a client certificate (``ikkai.settings.connect_auth``): the clusters file names
where the secrets are and never holds them. ``bootstrap_servers`` and ``kafka_config`` name the
environment's Kafka cluster and its client-properties file (``local``, the default: the cluster the
environment or the embedded stack names); ``kafka_cluster`` resolves them into the one ``KafkaContext``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from deploy.connect_rest import CONNECT_TIMEOUT
from ikkai.contract.kafka import KafkaContext, resolve_cluster
from ikkai.errors import ConfigError
from ikkai.resources import package_path
from ikkai.settings import (
    CONNECT_CREDENTIALS_VAR,
    ConnectAuth,
    connect_auth,
    endpoints_connect_auth,
    external_endpoints,
    ikkai_home,
)
from stack.status import embedded_endpoints

CLUSTERS_VAR = "IKKAI_CLUSTERS"
DEFAULT_CLUSTERS = package_path("connectors", "clusters.yaml")
LOCAL = "local"
_KEYS = {"connect_url", "wait_timeout_seconds", "connect_timeout_seconds", "credentials", "bootstrap_servers",
         "kafka_config"}  # fmt: skip


@dataclass(frozen=True)
class ClusterTarget:
    env: str
    connect_url: str  # an http(s) URL or "local"
    wait_timeout_seconds: float = 120.0
    connect_timeout_seconds: float = CONNECT_TIMEOUT  # to open a TCP connection; an unreachable worker fails this fast
    credentials: str = ""  # the REST credentials file ("": none, or IKKAI_CONNECT_CREDENTIALS / the stack's)
    bootstrap_servers: str = LOCAL  # the environment's Kafka cluster; "local": the environment's or the stack's
    kafka_config: str = ""  # its client-properties file ("": PLAINTEXT, or IKKAI_KAFKA_CONFIG for "local")


def clusters_file(explicit: Path | None = None, env: Mapping[str, str] = os.environ) -> Path:
    return explicit or (Path(env[CLUSTERS_VAR]) if env.get(CLUSTERS_VAR) else DEFAULT_CLUSTERS)


def parse_clusters(data: Any, source: str) -> dict[str, ClusterTarget]:
    if not isinstance(data, dict):
        raise ConfigError(
            source, "(top level)", "must map environment names to clusters", fix="e.g. dev: {connect_url: local}"
        )
    targets = {}
    for env_name, entry in data.items():
        if not isinstance(entry, dict):
            raise ConfigError(source, str(env_name), "must be a mapping", fix="e.g. connect_url: http://connect:8083")
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            raise ConfigError(
                source, f"{env_name}.{unknown[0]}", "unknown key", fix=f"allowed: {', '.join(sorted(_KEYS))}"
            )
        url = str(entry.get("connect_url") or "")
        if url != LOCAL and not url.startswith(("http://", "https://")):
            raise ConfigError(source, f"{env_name}.connect_url", f"{url!r} is not an http(s) URL or 'local'")
        timeout = _seconds(entry, "wait_timeout_seconds", 120.0, source, str(env_name))
        connect_timeout = _seconds(entry, "connect_timeout_seconds", CONNECT_TIMEOUT, source, str(env_name))
        bootstrap = str(entry.get("bootstrap_servers") or LOCAL).strip()
        kafka_config = str(entry.get("kafka_config") or "")
        if kafka_config and bootstrap == LOCAL:
            raise ConfigError(source, f"{env_name}.kafka_config", "names a client file for the local cluster",
                              fix="name bootstrap_servers, or set IKKAI_KAFKA_CONFIG for the local one")  # fmt: skip
        targets[str(env_name)] = ClusterTarget(
            env=str(env_name),
            connect_url=url.rstrip("/"),
            wait_timeout_seconds=timeout,
            connect_timeout_seconds=connect_timeout,
            credentials=str(entry.get("credentials") or ""),
            bootstrap_servers=bootstrap,
            kafka_config=kafka_config,
        )
    return targets


def _seconds(entry: Mapping[str, Any], key: str, default: float, source: str, env_name: str) -> float:
    try:
        value = float(entry.get(key, default))
    except (TypeError, ValueError) as exc:
        raise ConfigError(source, f"{env_name}.{key}", "must be a number of seconds") from exc
    if value <= 0:
        raise ConfigError(source, f"{env_name}.{key}", f"{value:g} is not a positive number of seconds")
    return value


def load_clusters(path: Path) -> dict[str, ClusterTarget]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(
            str(path), "(file)", f"cannot be read: {exc.strerror}", fix=f"create it or set {CLUSTERS_VAR}"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), "(file)", f"not valid YAML: {exc}") from exc
    return parse_clusters(data, str(path))


def cluster_for(env_name: str, path: Path) -> ClusterTarget:
    targets = load_clusters(path)
    if env_name not in targets:
        raise ConfigError(
            str(path), env_name, "no Connect cluster for this environment", fix=f"known: {', '.join(sorted(targets))}"
        )
    return targets[env_name]


def resolve_connect_auth(target: ClusterTarget) -> ConnectAuth:
    """How to authenticate to the target: its credentials file, else the endpoints' (``local``), else the env's."""
    if target.credentials:
        return connect_auth(target.credentials)
    if target.connect_url == LOCAL:
        endpoints = external_endpoints() or embedded_endpoints(ikkai_home())
        if endpoints is not None:
            return endpoints_connect_auth(endpoints)
    return connect_auth(os.environ.get(CONNECT_CREDENTIALS_VAR, "").strip() or None)


def kafka_cluster(target: ClusterTarget) -> KafkaContext:
    """The environment's Kafka cluster: its own entry, else (``local``) the environment's or the embedded stack's."""
    if target.bootstrap_servers != LOCAL:
        return KafkaContext.at(target.bootstrap_servers, target.kafka_config or None)
    cluster = resolve_cluster()
    if cluster is None:
        raise ConfigError("environment", target.env, "names no Kafka cluster and the embedded stack never started here",
                          fix="run `ikkai stack up`, set IKKAI_BOOTSTRAP_SERVERS, or name bootstrap_servers in the "
                          "clusters file")  # fmt: skip
    return cluster


def resolve_connect_url(target: ClusterTarget) -> str:
    """The URL to talk to; for ``local``: the external cluster of the environment, else the embedded stack."""
    if target.connect_url != LOCAL:
        return target.connect_url
    external = external_endpoints()
    if external is not None:
        return external.connect_url
    endpoints = embedded_endpoints(ikkai_home())
    if endpoints is None:
        raise ConfigError(
            "environment",
            target.env,
            "uses the embedded stack, which was never started here",
            fix="run `ikkai stack up` or set IKKAI_CONNECT_URL",
        )
    return endpoints.connect_url

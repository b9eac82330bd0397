"""Health probes that ask the real services, for any runtime (embedded, docker, external)."""

from __future__ import annotations

import logging
from typing import Any

import requests
from confluent_kafka.admin import AdminClient

from ikkai.contract.kafka import KafkaContext
from ikkai.settings import ConnectAuth

# librdkafka reports every refused connection while a broker starts; a probe expects those.
_quiet = logging.getLogger("ikkai.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def broker_answers(cluster: KafkaContext, timeout: float = 2.0, *, node_id: int | None = None) -> bool:
    """True when the cluster answers a metadata request with at least one broker; with ``node_id``,
    when that broker is among them (registered and unfenced: ask it at its own address,
    ``cluster.broker(address)``)."""
    admin = AdminClient(cluster.client_config(), logger=_quiet)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception:  # noqa: BLE001 - any failure means "not answering yet"
        return False
    return node_id in metadata.brokers if node_id is not None else bool(metadata.brokers)


def connect_plugins(connect_url: str, timeout: float = 2.0, *, auth: ConnectAuth | None = None) -> list[str] | None:
    """Connector classes a ready Connect worker has loaded, or None while it is not ready.

    Ready means the REST server answers ``GET /`` and the herder serves ``GET /connectors``
    (the REST API answers 503 until the worker has joined its group and read its config topic).
    """
    options: dict[str, Any] = (auth or ConnectAuth()).requests_options()
    try:
        root = requests.get(f"{connect_url}/", timeout=timeout, **options)
        if root.status_code != 200:
            return None
        connectors = requests.get(f"{connect_url}/connectors", timeout=timeout, **options)
        if connectors.status_code != 200:
            return None
        plugins = requests.get(f"{connect_url}/connector-plugins", timeout=timeout, **options)
        if plugins.status_code != 200:
            return None
        return [str(plugin["class"]) for plugin in plugins.json()]
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None


def spark_answers(master_ui: str, timeout: float = 2.0, *, worker_port: int | None = None) -> bool:
    """True when the Spark standalone master whose web UI is at ``master_ui`` says it is ALIVE (``GET /json/``);
    with ``worker_port``, when it also lists the worker of that RPC port as ALIVE (registered with it)."""
    try:
        state = requests.get(f"{master_ui}/json/", timeout=timeout).json()
    except (requests.RequestException, ValueError):
        return False
    if not isinstance(state, dict) or state.get("status") != "ALIVE":
        return False
    if worker_port is None:
        return True
    workers = state.get("workers")
    return isinstance(workers, list) and any(
        isinstance(w, dict) and w.get("port") == worker_port and w.get("state") == "ALIVE" for w in workers
    )

"""The plaintext embedded stack's doors, on the real stack: what its unauthenticated Connect REST API lets a caller do.

Anyone who reaches the worker can create connectors, and a connector config is resolved by the
worker's config providers: the ``file`` and ``dir`` providers read only under their ``allowed.paths``
(the temporary folder), the ``env`` provider only ``IKKAI_SECRET_…`` variables, and a connector may
override only the client settings the shipped bundles set. Connect's own validation (``PUT
/connector-plugins/<class>/config/validate``, which resolves providers as a connector start would
and writes nothing) shows each. The stack listens on loopback only.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import psutil
import pytest

from deploy.connect_rest import ConnectClient
from ikkai.settings import Endpoints
from stack.stack_config import CONNECTOR_CLIENT_OVERRIDES

pytestmark = pytest.mark.integration

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
OUTSIDE = Path("/etc/os-release")  # a properties-shaped file outside the temporary folder (ID=debian, …)


@pytest.fixture
def local(stack: Endpoints) -> Endpoints:
    if stack.runtime != "local":
        pytest.skip("the embedded stack's settings: an external cluster has its own")
    return stack


def _values(client: ConnectClient, connector_class: str, config: dict[str, str]) -> dict[str, tuple[Any, list[str]]]:
    """Each key's value after the worker resolved it, and its errors."""
    result = client.validate_config(connector_class, {"connector.class": connector_class, "name": "doors", **config})
    return {c["value"]["name"]: (c["value"]["value"], c["value"]["errors"]) for c in result["configs"]}


def test_a_connector_cannot_read_a_file_outside_the_allowed_paths(local: Endpoints, tmp_path: Path) -> None:
    if not OUTSIDE.is_file() or "ID" not in OUTSIDE.read_text():
        pytest.skip(f"{OUTSIDE} is not here")
    inside = tmp_path / "source.properties"
    inside.write_text("path=/from/an/allowed/file\n")
    reference = f"${{file:{OUTSIDE}:ID}}"
    values = _values(ConnectClient(local.connect_url), FILE_SOURCE, {
        "tasks.max": "1", "topic": reference, "file": f"${{file:{inside}:path}}",
    })  # fmt: skip
    assert values["file"][0] == "/from/an/allowed/file"  # inside the allowed paths: resolved
    assert values["topic"][0] == reference  # outside: the worker refused to read it, the reference stays


def test_the_env_provider_reads_only_variables_named_for_it(local: Endpoints) -> None:
    values = _values(ConnectClient(local.connect_url), FILE_SOURCE, {"tasks.max": "1", "topic": "${env:PATH}"})
    assert values["topic"][0] == "${env:PATH}"


def test_a_connector_overrides_only_the_client_settings_the_bundles_need(local: Endpoints) -> None:
    client = ConnectClient(local.connect_url)
    needed = {"acks": "all", "enable.idempotence": "true", "max.in.flight.requests.per.connection": "5",
              "isolation.level": "read_committed", "auto.offset.reset": "earliest", "session.timeout.ms": "10000",
              "heartbeat.interval.ms": "3000"}  # fmt: skip
    assert set(needed) == set(CONNECTOR_CLIENT_OVERRIDES)
    source = {f"producer.override.{k}": v for k, v in needed.items() if k not in ("isolation.level",)}
    sink = {f"consumer.override.{k}": v for k, v in needed.items() if k not in ("acks", "enable.idempotence")}
    refused = {"producer.override.bootstrap.servers": "elsewhere:9092",
               "producer.override.sasl.jaas.config": "x required;"}  # fmt: skip
    values = _values(client, FILE_SOURCE, {"tasks.max": "1", "topic": "t", **source, **refused})
    assert {key: errors for key, (_, errors) in values.items() if key in source and errors} == {}
    assert all(values[key][1] for key in refused), {key: values[key] for key in refused}
    values = _values(client, FILE_SINK, {"tasks.max": "1", "topics": "t", **sink,
                                         "consumer.override.group.id": "someone-elses"})  # fmt: skip
    assert {key: errors for key, (_, errors) in values.items() if key in sink and errors} == {}
    assert values["consumer.override.group.id"][1]


def test_the_stack_listens_on_loopback_only(local: Endpoints) -> None:
    ports = {int(local.bootstrap_servers.rsplit(":", 1)[1]), int(local.connect_url.rsplit(":", 1)[1])}
    owners = {c.pid for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.laddr.port in ports}
    assert len(owners) == 2 and None not in owners  # the broker's JVM and the worker's
    listening = [c.laddr for pid in owners if pid is not None for c in psutil.Process(pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]  # fmt: skip
    assert len(listening) >= 3  # the broker's client and controller listeners, the REST API
    assert [address for address in listening if not _loopback(address.ip)] == []


def _loopback(ip: str) -> bool:
    """127.0.0.1, also as a JVM's dual-stack socket shows it (``::ffff:127.0.0.1``)."""
    address = ipaddress.ip_address(ip)
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback

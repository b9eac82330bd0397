"""The embedded stack's endpoints read from its state file alone: what ``connect_url: local`` resolves to."""

from __future__ import annotations

import io
import json
from pathlib import Path

from stack.local_stack import LocalStack
from stack.schema_registry import STATE_FILE
from stack.stack_config import Ports
from stack.status import embedded_endpoints

PORTS = Ports(21092, 21093, 21083)


def _lifecycle_endpoints(home: Path) -> object:
    return LocalStack(home, home / "jars", progress=io.StringIO()).endpoints()


def test_a_home_that_never_started_has_no_endpoints(tmp_path: Path) -> None:
    assert embedded_endpoints(tmp_path) is None
    assert _lifecycle_endpoints(tmp_path) is None


def test_the_endpoints_are_the_saved_ports_as_the_stack_itself_reports_them(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(json.dumps({"ports": PORTS.as_dict(), "brokers": 1}))
    endpoints = embedded_endpoints(tmp_path)
    assert endpoints is not None
    assert endpoints.bootstrap_servers == "127.0.0.1:21092" and endpoints.connect_url == "http://127.0.0.1:21083"
    assert endpoints == _lifecycle_endpoints(tmp_path)


def test_a_recorded_registry_adds_its_url_and_an_unrecorded_one_does_not(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(json.dumps({"port": 21081}))
    (tmp_path / "stack.json").write_text(json.dumps({"ports": PORTS.as_dict()}))
    without = embedded_endpoints(tmp_path)
    assert without is not None and not without.schema_registry_url
    (tmp_path / "stack.json").write_text(json.dumps({"ports": PORTS.as_dict(), "registry": True}))
    endpoints = embedded_endpoints(tmp_path)
    assert endpoints is not None and endpoints.schema_registry_url.startswith("http://127.0.0.1:21081/")
    assert endpoints == _lifecycle_endpoints(tmp_path)


def test_a_secured_home_gives_https_and_its_client_files(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(json.dumps({"ports": PORTS.as_dict(), "secure": True}))
    endpoints = embedded_endpoints(tmp_path)
    assert endpoints is not None and endpoints.connect_url.startswith("https://")
    assert endpoints.kafka_config and endpoints.connect_credentials
    assert endpoints == _lifecycle_endpoints(tmp_path)

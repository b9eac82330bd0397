"""The routes of ``ikkai serve`` as OpenAPI describes them, and the request size limit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deploy.serve.app import MAX_BODY_BYTES, MAX_HEADER_BYTES
from deploy.serve.service import ControlPlane
from tests.deploy.serving import serve

TOKEN = "openapi-test-token-" + "o" * 16


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    yield from serve(ControlPlane(TOKEN, tmp_path, connect_url="http://127.0.0.1:9"))


def test_openapi_describes_every_route_with_its_method_and_needs_the_token(url: str) -> None:
    assert requests.get(f"{url}/openapi.json", timeout=5).status_code == 401
    schema = requests.get(f"{url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5).json()
    assert schema["openapi"].startswith("3.") and "bearer" in schema["components"]["securitySchemes"]
    methods = {path: sorted(operations) for path, operations in schema["paths"].items()}
    assert methods == {
        "/healthz": ["get"],
        "/metrics": ["get"],
        "/bundles/{bundle}/{env}/plan": ["get"],
        "/bundles/{bundle}/{env}/status": ["get"],
        "/bundles/{bundle}/{env}/apply": ["post"],
        "/bundles/{bundle}/{env}/restart": ["post"],
    }
    apply = schema["paths"]["/bundles/{bundle}/{env}/apply"]["post"]
    assert [p["name"] for p in apply["parameters"]] == ["bundle", "env", "prune"]
    assert {"200", "401", "403", "422"} <= set(apply["responses"]) and apply["security"] == [{"bearer": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]


def test_a_request_announcing_a_large_body_is_refused_before_the_token_is_looked_at(url: str) -> None:
    refused = requests.post(f"{url}/bundles/payments-ingest/dev/apply", data=b"x" * (MAX_BODY_BYTES + 1), timeout=5)
    assert refused.status_code == 413
    small = requests.post(f"{url}/bundles/payments-ingest/dev/apply", data=b"{}", timeout=5)
    assert small.status_code == 401


def test_headers_over_the_limit_are_refused(url: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Padding": "p" * MAX_HEADER_BYTES}
    assert requests.get(f"{url}/metrics", headers=headers, timeout=5).status_code == 431
    assert requests.get(f"{url}/metrics", headers={**headers, "X-Padding": "p" * 1024}, timeout=5).status_code == 200

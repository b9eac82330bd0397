"""``ikkai serve``: bearer token, health, metrics, the bundle routes and the reconcile loop."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from deploy.auto_restart import RestartBackoff, RestartStateFile
from deploy.connect_rest import ConnectClient
from deploy.connector_status import reached
from deploy.serve.service import ControlPlane, ReconcileLoop, read_token
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from ikkai.settings import Endpoints
from stack.kit.topic_io import read_all
from tests.cli.cli_runner import IKKAI
from tests.deploy.serving import serve

TOKEN = "test-token-Hq4vZ8sLw2NcR7kT1mXb9pYd3Gf6Jz0"  # noqa: S105 - a test's token, over 128 bits
SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"


@pytest.fixture
def offline_url(tmp_path: Path) -> Iterator[str]:
    yield from serve(ControlPlane(TOKEN, tmp_path, connect_url="http://127.0.0.1:9"))


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_token_is_required_and_compared_exactly(offline_url: str) -> None:
    assert requests.get(f"{offline_url}/healthz", timeout=5).json() == {"status": "ok"}
    for headers in ({}, auth("wrong-token-xxxxxxxxxxxx"), {"Authorization": TOKEN}, auth(TOKEN + "x")):
        response = requests.get(f"{offline_url}/bundles/payments-ingest/dev/plan", headers=headers, timeout=5)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert requests.get(f"{offline_url}/metrics", timeout=5).status_code == 401
    metrics = requests.get(f"{offline_url}/metrics", headers=auth(), timeout=5)
    assert metrics.status_code == 200
    assert 'ikkai_http_requests_total{code="401",route="/bundles"} 4.0' in metrics.text  # prometheus_client's order


def test_unknown_bundle_and_wrong_method_are_refused(offline_url: str) -> None:
    missing = requests.get(f"{offline_url}/bundles/nope/dev/plan", headers=auth(), timeout=5)
    assert missing.status_code == 422 and "no such bundle" in missing.json()["error"]
    assert requests.get(f"{offline_url}/bundles/nope/dev/apply", headers=auth(), timeout=5).status_code == 405
    assert requests.get(f"{offline_url}/bundles/../etc/dev/plan", headers=auth(), timeout=5).status_code == 404


def test_the_token_must_exist_and_be_long_enough(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="IKKAI_SERVE_TOKEN"):
        read_token({}, None)
    (tmp_path / "token").write_text("short\n")
    (tmp_path / "token").chmod(0o600)  # a token file others may read is refused (test_serve_tokens.py)
    with pytest.raises(ConfigError):
        read_token({}, tmp_path / "token")
    (tmp_path / "token").write_text(TOKEN + "\n")
    assert read_token({}, tmp_path / "token") == TOKEN


@pytest.mark.integration
def test_plan_apply_status_over_http_and_the_loop_restarts_a_failed_task(
    stack: Endpoints, cluster: KafkaContext, tmp_path: Path
) -> None:
    hex_ = uuid.uuid4().hex[:8]
    bundles = tmp_path / "bundles"
    shutil.copytree(SHIPPED / "payments-ingest", bundles / "payments-ingest")
    manifest = yaml.safe_load((bundles / "payments-ingest" / "bundle.yaml").read_text())
    manifest["owner_prefix"] = f"serve-{hex_}."
    (bundles / "payments-ingest" / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    payments, refunds = tmp_path / "payments.jsonl", tmp_path / "refunds.jsonl"
    payments.touch()
    refunds.touch()
    values = {
        "on_unkeyable": "fail",  # so that a bad line below fails the task
        "sources": {
            "payments": {"file": str(payments), "topic": f"ingest.payments.{hex_}"},
            "refunds": {"file": str(refunds), "topic": f"ingest.refunds.{hex_}"},
        },
    }
    (bundles / "payments-ingest" / "values" / "ci.yaml").write_text(yaml.safe_dump(values))
    plane = ControlPlane(TOKEN, bundles, connect_url=stack.connect_url)
    name = f"serve-{hex_}.payments"
    client = ConnectClient(stack.connect_url)
    try:
        for url in serve(plane):
            base = f"{url}/bundles/payments-ingest/ci"
            plan = requests.get(f"{base}/plan", headers=auth(), timeout=60).json()
            assert plan["summary"]["create"] == 2 and plan["pending"]
            applied = requests.post(f"{base}/apply", headers=auth(), timeout=180)
            assert applied.status_code == 200, applied.text
            status = requests.get(f"{base}/status", headers=auth(), timeout=60).json()
            assert {c["name"]: c["state"] for c in status["connectors"]} == {
                name: "RUNNING",
                f"serve-{hex_}.refunds": "RUNNING",
            }

            # A bad line fails the task; the loop restarts it once the line is repaired.
            bad, good = '{"payment": "p-7", "amount": 1}', '{"payment_id":"p-7","amount":1}'
            with payments.open("a") as f:
                f.write(bad + "\n")
            deadline = time.monotonic() + 90
            while not any(t["state"] == "FAILED" for t in client.connector_status(name)["tasks"]):
                assert time.monotonic() < deadline, "the task never failed"
                time.sleep(0.5)
            payments.write_text(good + "\n")
            loop = ReconcileLoop(plane, [("payments-ingest", "ci")], interval=1, backoff=RestartBackoff(base=1, cap=4))
            loop.once()
            assert plane.metrics.restarts[name] == 1 and loop.errors == []
            deadline = time.monotonic() + 90
            while not reached("running", client.connector_status(name)):
                assert time.monotonic() < deadline, "the task never came back"
                time.sleep(0.5)
            assert read_all(cluster, f"ingest.payments.{hex_}", expect=1, timeout=60) == [(b"p-7", good.encode())]
            metrics = requests.get(f"{url}/metrics", headers=auth(), timeout=5).text
            assert f'ikkai_connector_auto_restarts_total{{connector="{name}"}} 1' in metrics
            assert 'ikkai_bundle_applies_total{bundle="payments-ingest",env="ci",result="ok"} 2' in metrics
    finally:
        for connector in client.connectors():
            if connector.startswith(f"serve-{hex_}."):
                client.delete_connector(connector)


def test_serve_refuses_to_start_without_a_token() -> None:
    from tests.cli.cli_runner import run_ikkai

    result = run_ikkai("serve", "--port", "0", timeout=60)
    assert result.returncode == 1
    assert "IKKAI_SERVE_TOKEN" in result.stderr and "token" in result.stderr


@pytest.mark.integration
def test_the_serve_command_reconciles_its_bundles_on_an_interval(stack: Endpoints, tmp_path: Path) -> None:
    import os
    import subprocess

    from stack.ports import free_port

    hex_ = uuid.uuid4().hex[:8]
    bundles = tmp_path / "bundles"
    shutil.copytree(SHIPPED / "payments-ingest", bundles / "payments-ingest")
    manifest = yaml.safe_load((bundles / "payments-ingest" / "bundle.yaml").read_text())
    manifest["owner_prefix"] = f"loop-{hex_}."
    (bundles / "payments-ingest" / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    sources = {}
    for endpoint in ("payments", "refunds"):
        (tmp_path / f"{endpoint}.jsonl").touch()
        sources[endpoint] = {"file": str(tmp_path / f"{endpoint}.jsonl"), "topic": f"ingest.{endpoint}.{hex_}"}
    (bundles / "payments-ingest" / "values" / "ci.yaml").write_text(yaml.safe_dump({"sources": sources}))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")}
    server = subprocess.Popen(
        [
            str(IKKAI),
            "serve",
            "--port",
            str(port),
            "--token-file",
            str(token_file),
            "--bundles-dir",
            str(bundles),
            "--connect-url",
            stack.connect_url,
            "--reconcile",
            "payments-ingest/ci",
            "--interval",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    client = ConnectClient(stack.connect_url)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else "serve exited"
            try:
                metrics = requests.get(f"http://127.0.0.1:{port}/metrics", headers=auth(), timeout=5).text
            except requests.ConnectionError:
                metrics = ""
            states = [line for line in metrics.splitlines() if line.startswith("ikkai_connector_state{")]
            if len(states) == 2 and all('state="RUNNING"' in line for line in states):
                break
            assert time.monotonic() < deadline, f"the loop never brought the bundle up: {metrics}"
            time.sleep(0.5)
        assert sorted(n for n in client.connectors() if n.startswith(f"loop-{hex_}.")) == [
            f"loop-{hex_}.payments",
            f"loop-{hex_}.refunds",
        ]
    finally:
        server.terminate()
        server.wait(30)
        for connector in client.connectors():
            if connector.startswith(f"loop-{hex_}."):
                client.delete_connector(connector)


@pytest.mark.integration
def test_auto_restart_stops_at_max_restarts_and_remembers_it_across_a_restart_of_serve(
    stack: Endpoints, tmp_path: Path
) -> None:
    hex_ = uuid.uuid4().hex[:8]
    bundles = tmp_path / "bundles"
    shutil.copytree(SHIPPED / "payments-ingest", bundles / "payments-ingest")
    manifest = yaml.safe_load((bundles / "payments-ingest" / "bundle.yaml").read_text())
    manifest["owner_prefix"] = f"maxr-{hex_}."
    manifest["connectors"] = manifest["connectors"][:1]  # payments only
    (bundles / "payments-ingest" / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    payments = tmp_path / "payments.jsonl"
    payments.touch()
    values = {
        "on_unkeyable": "fail",
        "sources": {"payments": {"file": str(payments), "topic": f"ingest.payments.{hex_}"}},
    }
    (bundles / "payments-ingest" / "values" / "ci.yaml").write_text(yaml.safe_dump(values))
    name = f"maxr-{hex_}.payments"
    key = f"ci/{name}"
    state_file = RestartStateFile(tmp_path / "home" / "auto-restart.json")
    now = [1_000_000.0]
    client = ConnectClient(stack.connect_url)

    def loop() -> tuple[ControlPlane, ReconcileLoop]:
        plane = ControlPlane(TOKEN, bundles, connect_url=stack.connect_url)
        backoff = RestartBackoff(base=1, cap=1, max_restarts=1, reset_after=10**9)  # the clock jumps hours
        return plane, ReconcileLoop(
            plane, [("payments-ingest", "ci")], interval=1, backoff=backoff, clock=lambda: now[0], state_file=state_file
        )

    def failed() -> bool:
        return any(t["state"] == "FAILED" for t in client.connector_status(name)["tasks"])

    def wait_failed() -> None:
        deadline = time.monotonic() + 90
        while not failed():
            assert time.monotonic() < deadline, "the task never failed"
            time.sleep(0.5)

    def wait_failed_again() -> None:
        """After a restart: RESTARTING (KIP-745) or RUNNING for a moment, then FAILED on the same line."""
        deadline = time.monotonic() + 30
        while failed() and time.monotonic() < deadline:  # a missed moment is not an error: it failed again
            time.sleep(0.1)
        wait_failed()

    try:
        plane, first = loop()
        first.once()  # applies the bundle
        assert first.errors == [] and reached("running", client.connector_status(name))
        with payments.open("a") as f:
            f.write('{"payment": "no business id"}\n')  # fails the task on every start
        wait_failed()

        now[0] += 10
        first.once()
        assert plane.metrics.restarts[name] == 1
        saved = json.loads(state_file.path.read_text())["connectors"][key]
        assert saved["restarts"] == 1 and saved["exhausted"] is True and saved["last_restart"] == now[0]

        wait_failed_again()
        now[0] += 3600
        first.once()
        assert plane.metrics.restarts[name] == 1  # the maximum was reached: left for a person
        assert f'ikkai_connector_auto_restart_exhausted{{connector="{name}"}} 1' in plane.metrics.render()

        plane, second = loop()  # serve restarted: the count comes from the state file
        assert second.backoff.restarts(key) == 1
        now[0] += 3600
        second.once()
        assert plane.metrics.restarts[name] == 0 and second.errors == []
    finally:
        for connector in client.connectors():
            if connector.startswith(f"maxr-{hex_}."):
                client.delete_connector(connector)

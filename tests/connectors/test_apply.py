"""The control plane against the real Connect worker: apply, zero-write re-apply, validation,
lint before writes, rollback with the task trace, prune, restart of failed tasks, stable plans."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer

from connectors.errors import BundleError, PolicyViolation
from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest
from deploy.connect_rest import ConnectClient
from deploy.connector_status import reached
from deploy.reconcile import ApplyFailed, ValidationFailed
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from stack.kit.topic_io import read_all, unique
from tests.cli.cli_runner import run_ikkai

pytestmark = pytest.mark.integration
STRICT = "on_unkeyable=fail"  # a line without payment_id fails the task (the default lands it unkeyed)


class Drop:
    """A payments-ingest copy with its own owner prefix, drop files and topics."""

    def __init__(self, folder: Path, files: Path, stack: Endpoints) -> None:
        self.folder = folder
        self.hex = uuid.uuid4().hex[:8]
        self.prefix = yaml.safe_load((folder / "bundle.yaml").read_text())["owner_prefix"]
        self.payments = files / "payments.jsonl"
        self.refunds = files / "refunds.jsonl"
        self.payments.touch()
        self.refunds.touch()
        self.topics = {"payments": f"ingest.payments.{self.hex}", "refunds": f"ingest.refunds.{self.hex}"}
        self.stack = stack

    def sets(self, *extra: str) -> tuple[str, ...]:
        return (
            f"sources.payments.file={self.payments}",
            f"sources.refunds.file={self.refunds}",
            f"sources.payments.topic={self.topics['payments']}",
            f"sources.refunds.topic={self.topics['refunds']}",
            "partitions=2",
            *extra,
        )

    def request(self, *extra: str) -> BundleRequest:
        return BundleRequest(str(self.folder), "dev", self.sets(*extra), connect_url=self.stack.connect_url)

    def names(self) -> list[str]:
        return [f"{self.prefix}payments", f"{self.prefix}refunds"]


@pytest.fixture
def drop(stack: Endpoints, shipped_bundle: Callable[[str, str], Path], tmp_path: Path) -> Iterator[Drop]:
    folder = shipped_bundle("payments-ingest", f"test-{uuid.uuid4().hex[:8]}.")
    d = Drop(folder, tmp_path, stack)
    yield d
    client = ConnectClient(stack.connect_url)
    for name in client.connectors():
        if name.startswith(d.prefix):
            client.delete_connector(name)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_apply_runs_both_connectors_and_raw_lines_land_keyed_by_business_id(
    drop: Drop, stack: Endpoints, cluster: KafkaContext
) -> None:
    lines = ['{"payment_id": "p-1", "amount": 10}', '{ "amount": 7.50, "payment_id":"p-2" }', '{"payment_id": "p-1"}']
    drop.payments.write_text("\n".join(lines) + "\n")
    drop.refunds.write_text('{"refund_id": "r-9", "payment_id": "p-1"}\n')
    client = ConnectClient(stack.connect_url)

    result = bundle_ops.apply_data(drop.request(), client=client)

    assert result["states"] == dict.fromkeys(drop.names(), "RUNNING")
    for name in drop.names():  # what Connect itself says, not what apply believed
        assert reached("running", client.connector_status(name))
    landed = read_all(cluster, drop.topics["payments"], expect=3, timeout=60)
    assert sorted(landed) == sorted((json.loads(v)["payment_id"].encode(), v.encode()) for v in lines)
    assert read_all(cluster, drop.topics["refunds"], expect=1, timeout=60) == [
        (b"r-9", b'{"refund_id": "r-9", "payment_id": "p-1"}')
    ]


def test_a_line_without_a_business_id_still_lands_unkeyed_with_the_reason_and_ingestion_goes_on(
    drop: Drop, stack: Endpoints
) -> None:
    """Raw topics keep everything (rule 7): enrich, not the boundary, sends these to its DLQ."""
    lines = ['{"payment_id": "p-1"}', "not json at all", '{"amount": 3}', '["p-2"]', '{"payment_id": "p-2"}']
    drop.payments.write_text("\n".join(lines) + "\n")
    client = ConnectClient(stack.connect_url)

    bundle_ops.apply_data(drop.request(), client=client)

    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": unique("test.raw"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe([drop.topics["payments"]])
    landed: dict[bytes, tuple[bytes | None, dict[str, bytes]]] = {}
    deadline = time.monotonic() + 60
    try:
        while len(landed) < len(lines) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                landed[message.value()] = (message.key(), dict(message.headers() or []))
    finally:
        consumer.close()
    assert set(landed) == {line.encode() for line in lines}  # every line, byte for byte
    assert landed[b'{"payment_id": "p-2"}'][0] == b"p-2"  # lines after the bad ones still land keyed
    for bad in ("not json at all", '{"amount": 3}', '["p-2"]'):
        key, headers = landed[bad.encode()]
        assert key is None
        assert b"payment_id" in headers["ikkai.key.error"] or b"not JSON" in headers["ikkai.key.error"]
    assert reached("running", client.connector_status(f"{drop.prefix}payments"))


def test_reapply_writes_nothing_and_one_changed_value_is_one_put(drop: Drop, stack: Endpoints) -> None:
    bundle_ops.apply_data(drop.request())

    again = ConnectClient(stack.connect_url)
    result = bundle_ops.apply_data(drop.request(), client=again)
    assert again.writes == [] and result["written"] == []
    assert result["plan"]["summary"] == {"create": 0, "update": 0, "delete": 0, "unchanged": 2}

    changed = ConnectClient(stack.connect_url)
    other = drop.refunds.with_name("refunds-2.jsonl")
    other.touch()
    result = bundle_ops.apply_data(drop.request(f"sources.refunds.file={other}"), client=changed)
    assert changed.writes == [("PUT", f"/connectors/{drop.prefix}refunds/config")]
    assert result["plan"]["summary"]["update"] == 1
    assert ConnectClient(stack.connect_url).connector_config(f"{drop.prefix}refunds")["file"] == str(other)


def test_a_config_the_plugin_rejects_gives_per_key_errors_and_writes_nothing(drop: Drop, stack: Endpoints) -> None:
    client = ConnectClient(stack.connect_url)
    with pytest.raises(ValidationFailed) as caught:  # a number, as declared, but one Connect refuses
        bundle_ops.apply_data(drop.request("tasks_max=0"), client=client)
    assert set(caught.value.errors) == set(drop.names())
    assert any(key == "tasks.max" and "at least 1" in msg for key, msg in caught.value.errors[drop.names()[0]])
    assert client.writes == []
    assert not [n for n in client.connectors() if n.startswith(drop.prefix)]


def test_undefined_variable_is_a_file_line_error_from_the_cli(drop: Drop, stack: Endpoints) -> None:
    (drop.folder / "values" / "bare.yaml").write_text("sources: {payments: {}, refunds: {}}\n")
    result = run_ikkai("bundle", "apply", str(drop.folder), "--env", "bare", "--connect-url", stack.connect_url)
    assert result.returncode == 1
    assert "templates/file-source.json.j2 line 7: undefined variable 'file'" in result.stderr
    assert "values/bare.yaml" in result.stderr
    assert not [n for n in ConnectClient(stack.connect_url).connectors() if n.startswith(drop.prefix)]


def test_a_literal_password_fails_lint_and_nothing_is_written(drop: Drop, stack: Endpoints) -> None:
    template = drop.folder / "templates" / "file-source.json.j2"
    template.write_text(
        template.read_text().replace('"errors.tolerance"', '"sasl.password": "hunter2",\n  "errors.tolerance"')
    )
    client = ConnectClient(stack.connect_url)
    with pytest.raises(PolicyViolation) as caught:
        bundle_ops.apply_data(drop.request(), client=client)
    assert caught.value.findings[0][0] == "secret-placeholder" and "hunter2" not in str(caught.value)
    assert client.writes == []
    rendered = run_ikkai("bundle", "render", str(drop.folder), *[a for s in drop.sets() for a in ("--set", s)])
    assert (
        rendered.returncode == 0 and "hunter2" not in rendered.stdout and "sasl.password=<redacted>" in rendered.stdout
    )


def test_a_failing_task_rolls_back_and_reports_its_trace(drop: Drop, stack: Endpoints) -> None:
    drop.payments.write_text('{"id": "no business key here"}\n')
    client = ConnectClient(stack.connect_url)
    with pytest.raises(ApplyFailed) as caught:
        bundle_ops.apply_data(drop.request(STRICT), client=client)
    assert caught.value.connector == f"{drop.prefix}payments"
    assert "payment_id" in caught.value.trace
    assert set(caught.value.rolled_back) == set(drop.names())
    assert not [n for n in client.connectors() if n.startswith(drop.prefix)]  # both were new: deleted again


def test_prune_deletes_only_owned_connectors(drop: Drop, stack: Endpoints) -> None:
    client = ConnectClient(stack.connect_url)
    bundle_ops.apply_data(drop.request())
    foreign = f"foreign-{drop.hex}"
    client.put_connector_config(foreign, {**client.connector_config(f"{drop.prefix}refunds"), "name": foreign})
    try:
        manifest = yaml.safe_load((drop.folder / "bundle.yaml").read_text())
        manifest["connectors"] = [c for c in manifest["connectors"] if c["name"] != "refunds"]
        (drop.folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
        # Values for the refunds connector would now be used by no template: an error, so they go too.
        sets = tuple(s for s in drop.sets() if not s.startswith("sources.refunds."))
        payments_only = BundleRequest(str(drop.folder), "dev", sets, connect_url=stack.connect_url)

        assert bundle_ops.plan_data(payments_only)["unpruned"] == [f"{drop.prefix}refunds"]  # shown, kept
        plan = bundle_ops.plan_data(payments_only, prune=True)
        assert plan["unpruned"] == []
        assert [(c["name"], c["action"]) for c in plan["connectors"]] == [
            (f"{drop.prefix}payments", "unchanged"),
            (f"{drop.prefix}refunds", "delete"),
        ]
        result = bundle_ops.apply_data(payments_only, prune=True)
        assert result["deleted"] == [f"{drop.prefix}refunds"]
        live = client.connectors()
        assert foreign in live and f"{drop.prefix}payments" in live and f"{drop.prefix}refunds" not in live
    finally:
        client.delete_connector(foreign)


def test_target_states_are_honoured_and_stable(drop: Drop, stack: Endpoints) -> None:
    manifest = yaml.safe_load((drop.folder / "bundle.yaml").read_text())
    manifest["connectors"][0]["state"] = "paused"
    manifest["connectors"][1]["state"] = "stopped"
    (drop.folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    creator = ConnectClient(stack.connect_url)
    result = bundle_ops.apply_data(drop.request(), client=creator)
    assert result["states"] == {drop.names()[0]: "PAUSED", drop.names()[1]: "STOPPED"}
    # Created in their target state (initial_state), never first started and then paused/stopped.
    assert creator.writes == [("POST", "/connectors"), ("POST", "/connectors")]
    client = ConnectClient(stack.connect_url)
    assert bundle_ops.apply_data(drop.request(), client=client)["written"] == [] and client.writes == []

    manifest["connectors"][0]["state"] = manifest["connectors"][1]["state"] = "running"
    (drop.folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    resumer = ConnectClient(stack.connect_url)
    assert bundle_ops.apply_data(drop.request(), client=resumer)["states"] == dict.fromkeys(drop.names(), "RUNNING")
    assert resumer.writes == [("PUT", f"/connectors/{n}/resume") for n in drop.names()]

    manifest["connectors"][1]["state"] = "stopped"
    (drop.folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    stopper = ConnectClient(stack.connect_url)
    assert bundle_ops.apply_data(drop.request(), client=stopper)["states"] == {
        drop.names()[1]: "STOPPED",
        drop.names()[0]: "RUNNING",
    }
    assert stopper.writes == [("PUT", f"/connectors/{drop.names()[1]}/stop")]


def test_restart_failed_brings_a_failed_task_back(drop: Drop, stack: Endpoints, cluster: KafkaContext) -> None:
    bundle_ops.apply_data(drop.request(STRICT))
    name = f"{drop.prefix}payments"
    client = ConnectClient(stack.connect_url)
    bad = '{"payment": "p-7", "amount": 1}'
    with drop.payments.open("a") as f:
        f.write(bad + "\n")
    wait_for(lambda: any(t["state"] == "FAILED" for t in client.connector_status(name)["tasks"]), "the task to fail")
    status = bundle_ops.status_data(drop.request(STRICT))
    assert "payment_id" in status["connectors"][0]["tasks"][0]["trace"]
    plan = bundle_ops.plan_data(drop.request(STRICT))  # the config is fine: plan says so, and names the failed task
    assert plan["pending"] is False and plan["connectors"][0]["failed_tasks"] == [0]

    # The operator repairs the line in place (same length, so the task's byte offset still fits) ...
    good = '{"payment_id":"p-7","amount":1}'
    assert len(good) == len(bad)
    drop.payments.write_text(good + "\n")
    # ... and restarts only what failed.
    result = run_ikkai(
        "bundle",
        "restart",
        str(drop.folder),
        "--failed",
        "-o",
        "json",
        "--connect-url",
        stack.connect_url,
        *[a for s in drop.sets(STRICT) for a in ("--set", s)],
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["restarted"] == [name]
    wait_for(lambda: reached("running", client.connector_status(name)), "the task to run again")
    assert read_all(cluster, drop.topics["payments"], expect=1, timeout=60) == [(b"p-7", good.encode())]


def test_plan_json_is_stable_and_exit_codes_say_what_is_pending(drop: Drop, stack: Endpoints) -> None:
    args = ["bundle", "plan", str(drop.folder), "-o", "json", "--connect-url", stack.connect_url]
    args += [a for s in drop.sets() for a in ("--set", s)]
    first, second = run_ikkai(*args), run_ikkai(*args)
    assert first.returncode == second.returncode == 2, first.stderr
    assert first.stdout == second.stdout
    assert json.loads(first.stdout)["summary"]["create"] == 2
    bundle_ops.apply_data(drop.request())
    after = run_ikkai(*args)
    assert after.returncode == 0 and json.loads(after.stdout)["pending"] is False


def test_render_error_is_raised_before_any_request(drop: Drop) -> None:
    with pytest.raises(BundleError):
        bundle_ops.apply_data(BundleRequest(str(drop.folder), "nope", connect_url="http://127.0.0.1:9"))


def test_an_update_that_fails_is_rolled_back_to_the_previous_config(drop: Drop, stack: Endpoints) -> None:
    bundle_ops.apply_data(drop.request(STRICT))
    name = f"{drop.prefix}payments"
    client = ConnectClient(stack.connect_url)
    before = client.connector_config(name)
    broken = drop.payments.with_name("unkeyed.jsonl")  # a new file is read from its start
    broken.write_text('{"id": "no business key here"}\n')

    with pytest.raises(ApplyFailed) as caught:
        bundle_ops.apply_data(drop.request(STRICT, f"sources.payments.file={broken}"))

    assert caught.value.connector == name and "payment_id" in caught.value.trace
    assert caught.value.rolled_back == [name]
    assert client.connector_config(name) == before
    wait_for(lambda: reached("running", client.connector_status(name)), "the restored connector to run")


def test_password_typed_keys_come_from_the_plugins_config_definitions(stack: Endpoints) -> None:
    from connectors.render import load_bundle, render_bundle
    from deploy.reconcile import Reconciler
    from tests.connectors.conftest import SHIPPED

    rendered = render_bundle(load_bundle(SHIPPED / "postgres-cdc"), "dev")
    catalog = Reconciler(ConnectClient(stack.connect_url)).catalog(rendered)
    info = catalog.info("io.debezium.connector.postgresql.PostgresConnector")
    assert info.kind == "source"
    assert "database.password" in info.password_keys  # declared PASSWORD by Debezium itself


def test_apply_from_the_cli_shows_progress_on_stderr_and_keeps_stdout_for_the_result(
    drop: Drop, stack: Endpoints
) -> None:
    sets = [a for s in drop.sets() for a in ("--set", s)]
    result = run_ikkai("bundle", "apply", str(drop.folder), "--connect-url", stack.connect_url, *sets)
    assert result.returncode == 0, result.stderr
    progress = result.stderr.splitlines()
    assert all(line.startswith("[") and "s] " in line for line in progress)
    said = [line.split("s] ", 1)[1] for line in progress]
    assert f"{drop.prefix}payments: created, target RUNNING" in said
    assert any(line.startswith("waiting up to 120s for 2 connector(s)") for line in said)
    assert f"{drop.prefix}payments: connector RUNNING, tasks 0:RUNNING" in said  # the state it waited for
    assert "apply: 2 connector(s) written" in result.stdout and "waiting" not in result.stdout

    quiet = run_ikkai("bundle", "apply", str(drop.folder), "--connect-url", stack.connect_url, "-o", "json", *sets)
    assert quiet.returncode == 0 and quiet.stderr == ""  # with -o json stderr is for an error object only
    assert json.loads(quiet.stdout)["written"] == []

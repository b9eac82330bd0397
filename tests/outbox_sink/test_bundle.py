"""The outbox-sink bundle: renders for every environment, passes the policy lint, and delivers when applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.lint import blocking, lint_bundle
from connectors.render import load_bundle, render_bundle
from demo.receiver import ReferenceReceiver
from deploy.connect_rest import ConnectClient
from deploy.reconcile import Reconciler
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from outbox_sink import OutboxEmitter, ReceiptReader, create_outbox_topics
from stack.kit.topic_io import unique
from tests.outbox_sink.conftest import make_request, outbox_bundle, read_dead_letters

BUNDLE = Path(__file__).resolve().parents[2] / "connectors" / "bundles" / "outbox-sink"
DEV_SETS = ["kafka.bootstrap_servers=127.0.0.1:9092"]


@pytest.mark.parametrize(("env", "sets"), [("dev", DEV_SETS), ("prod", [])])
def test_the_bundle_renders_and_passes_the_policy_lint(env: str, sets: list[str]) -> None:
    rendered = render_bundle(load_bundle(BUNDLE), env, sets)
    [connector] = rendered.connectors
    assert connector.config["consumer.override.isolation.level"] == "read_committed"
    assert connector.config["errors.deadletterqueue.topic.name"] == "dlq.outbox"
    assert blocking(lint_bundle(rendered)) == []


@pytest.mark.integration
def test_the_applied_bundle_delivers_with_the_secret_from_a_config_provider(stack: Endpoints, tmp_path: Path) -> None:
    secrets = tmp_path / "outbox-secrets.properties"
    secrets.write_text("payments_api_authorization=Bearer from-a-file\n")
    topics = {"requests": unique("outbox.requests"), "receipts": unique("outbox.receipts"), "dlq": unique("outbox")}
    create_outbox_topics(
        KafkaContext.recorded(stack),
        requests=topics["requests"],
        receipts=topics["receipts"],
        dlq="dlq." + topics["dlq"],
    )
    with ReferenceReceiver(tmp_path / "r.sqlite", auth=("Authorization", "Bearer from-a-file")) as receiver:
        sets = [
            f"kafka.bootstrap_servers={stack.bootstrap_servers}",
            *(f"topics.{k}={v}" for k, v in topics.items()),
            f"targets.payments-api.url={receiver.url}/payments",
            f"targets.notifications-api.url={receiver.url}/notifications",
            "targets.payments-api.auth_header=Authorization",
            f"targets.payments-api.auth_secret=${{file:{secrets}:payments_api_authorization}}",
        ]
        rendered = render_bundle(outbox_bundle(unique("test-outbox") + "."), "dev", sets)
        client = ConnectClient(stack.connect_url)
        reconciler = Reconciler(client)
        reconciler.apply(rendered)
        try:
            # Connect stores and shows the reference, never the secret it resolves to.
            stored = client.connector_config(rendered.connectors[0].name)
            assert stored["outbox.target.payments-api.auth.secret"] == f"${{file:{secrets}:payments_api_authorization}}"
            paid = make_request(0, "pay-bundle")
            unauthenticated = make_request(1, "order-bundle", target="notifications-api", prefix="notify")
            with OutboxEmitter(KafkaContext.recorded(stack), topic=topics["requests"]) as emitter:
                emitter.emit(paid)
                emitter.emit(unauthenticated)
            with ReceiptReader(KafkaContext.recorded(stack), topic=topics["receipts"]) as reader:
                receipts = reader.wait_for([paid.decision_id, unauthenticated.decision_id], 120)
        finally:
            reconciler.delete(rendered)

        assert receipts[paid.decision_id].outcome == "DELIVERED"
        [applied] = receiver.applied()
        assert applied.headers["authorization"] == "Bearer from-a-file"
        # The alias without credentials is refused by the API (401): a 4xx, so dead-lettered at once.
        assert (receipts[unauthenticated.decision_id].outcome, receipts[unauthenticated.decision_id].status_code) == (
            "DEAD_LETTERED",
            401,
        )
        [dead] = read_dead_letters(stack.bootstrap_servers, "dlq." + topics["dlq"], expect=1)
        assert dead.headers["ikkai.dlq.status_code"] == "401"

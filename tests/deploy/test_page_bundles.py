"""The bundles and connectors views against the real Connect worker of the session's stack: a bundle whose
validation answers 500 (the shipped dev postgres-cdc: its password's config provider cannot read its file) is
shown at once and no view waits on a retry (each answers within ``ANSWER_SECONDS``; the 2 s target is measured by
``benchmarks.page_scale``, not asserted here); a connector made by hand, outside every bundle, is listed; an
apply from the CLI shows who ran it, and one from the page the name given at its login; the demo's two bundles,
applied as the demo applies them, read in sync until a config is changed on Connect."""

from __future__ import annotations

import re
import secrets
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from demo.lineup import Lineup
from demo.live_page import LivePage
from deploy import bundle_ops
from deploy.applies import cli_user
from deploy.bundle_ops import BUNDLES
from deploy.connect_rest import ConnectClient
from deploy.serve.page.bundle_rows import bundle_rows
from deploy.serve.page.health_sampler import DEFAULT_SECONDS
from deploy.serve.page.views import DRIFTED, IN_SYNC
from deploy.serve.service import ControlPlane, ServeTokens
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from tests.cli.cli_runner import run_ikkai
from tests.deploy.serving import serve

pytestmark = pytest.mark.integration

TOKEN = "bundles-token-" + secrets.token_urlsafe(32)  # over 128 bits, as `ikkai serve` asks
SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"
# Every view, on a loaded machine: far under the Connect client's one-minute retry of a 500 (the bug), which a view
# that waited on it would take. The speed target (2 s) is a benchmark's (benchmarks/page_scale.py), not a test's.
ANSWER_SECONDS = 20.0
SHOWN_SECONDS = 30.0  # the validate 500 on the page; retried for a minute (the bug), it would take 60 s


@pytest.fixture
def page(stack: Endpoints, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """The page over a copy of the shipped payments-ingest and postgres-cdc bundles (dev), on the stack."""
    bundles = tmp_path / "bundles"
    for name in ("payments-ingest", "postgres-cdc"):
        shutil.copytree(SHIPPED / name, bundles / name)
    # As shipped, with the password file somewhere surely absent (the shipped path may exist on a workstation).
    values = bundles / "postgres-cdc" / "values" / "dev.yaml"
    absent = tmp_path / "no-secrets" / "postgres.properties"
    values.write_text(values.read_text().replace("/tmp/ikkai-secrets/postgres.properties", str(absent)))
    drop = tmp_path / "drop"
    drop.mkdir()
    ingest = bundles / "payments-ingest" / "values" / "dev.yaml"
    ingest.write_text(ingest.read_text().replace("/tmp/ikkai-drop", str(drop)))
    clusters = tmp_path / "clusters.yaml"
    dev = {"connect_url": stack.connect_url, "bootstrap_servers": stack.bootstrap_servers}
    clusters.write_text(yaml.safe_dump({"dev": dev}))
    tokens = ServeTokens(((TOKEN, frozenset({"dev"})),))
    plane = ControlPlane(tokens, bundles, stack.connect_url, clusters, health_seconds=DEFAULT_SECONDS)  # as ikkai serve
    yield from ((url, bundles, clusters) for url in serve(plane))


def timed_get(session: requests.Session, url: str) -> str:
    started = time.monotonic()
    answer = session.get(url, timeout=120)
    took = time.monotonic() - started
    assert answer.status_code == 200, answer.text[:500]
    assert took < ANSWER_SECONDS, f"{url} took {took:.1f} s"
    return answer.text


def shown_within(session: requests.Session, url: str, seconds: float, pattern: str) -> str:
    """The view's text once ``pattern`` is in it (each load within ``ANSWER_SECONDS``); fails after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        text = timed_get(session, url)
        if re.search(pattern, text):
            return text
        assert time.monotonic() < deadline, f"{pattern!r} not on {url} within {seconds} s: {text[-2000:]}"
        time.sleep(0.5)  # a reload's pace, not a wait for a condition: the condition is polled


def test_a_validate_500_is_shown_at_once_and_no_view_waits_on_a_retry(
    stack: Endpoints, page: tuple[str, Path, Path]
) -> None:
    url, bundles, clusters = page
    client = ConnectClient(stack.connect_url)
    hand_made = f"hand-made-{uuid.uuid4().hex[:8]}"
    client.put_connector_config(hand_made, {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
        "topics": f"{hand_made}-in", "file": str(bundles.parent / "sink.txt"),
    })  # fmt: skip
    try:
        applied = run_ikkai("bundle", "apply", str(bundles / "payments-ingest"), "--env", "dev",
                            "--clusters", str(clusters))  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        session = requests.Session()
        session.headers["Origin"] = url  # as a browser posts the page's forms
        assert session.post(f"{url}/ui/login", data={"token": TOKEN, "name": "ana"}, timeout=30).status_code == 200

        view = f"{url}/ui/env/dev/bundles"
        text = shown_within(session, view, SHOWN_SECONDS, "Could not read properties from file")
        postgres = text[text.index('data-bundle="postgres-cdc"') :]
        assert "(invalid)" in postgres.split("</tr>")[0]  # the row says it; its details say why
        assert "postgres.properties" in postgres
        ingest = text[text.index('data-bundle="payments-ingest"') :].split("</tr>")[0]
        assert f"by {cli_user()}" in ingest and "as rendered now" in ingest  # the CLI's apply, its applier

        csrf = re.search(r'name="csrf" value="([^"]+)"', text)
        assert csrf is not None
        action = f"{url}/ui/env/dev/bundles/payments-ingest/apply"
        assert session.post(action, data={"csrf": csrf.group(1)}, timeout=300).status_code == 200
        shown_within(session, view, SHOWN_SECONDS, r"by ana \(page\)")  # the page's apply, its logged-in user

        connectors = shown_within(session, f"{url}/ui/env/dev/connectors", SHOWN_SECONDS, hand_made)
        unbundled = connectors[connectors.index('id="unbundled"') :]
        assert f'data-connector="{hand_made}"' in unbundled
        assert 'data-connector="payments-ingest.payments"' not in unbundled  # in its bundle's section, above
        for other in ("flow", "health"):
            timed_get(session, f"{url}/ui/env/dev/{other}")
    finally:
        for name in (hand_made, "payments-ingest.payments", "payments-ingest.refunds"):
            if name in client.connectors():
                client.delete_connector(name)


def test_the_bundles_the_demo_applies_read_in_sync_and_a_config_changed_on_connect_drifted(
    stack: Endpoints, tmp_path: Path
) -> None:
    """The demo's two shipped bundles, applied with the demo's own overrides (its lineup's requests) and handed to
    the page as the demo hands them (``LivePage.renders_as``): the page's rows say in sync; one config changed on
    Connect by hand says drifted, on that connector alone."""
    run_dir = tmp_path / "run"
    (run_dir / "drop").mkdir(parents=True)
    for name in ("payments.jsonl", "refunds.jsonl"):
        (run_dir / "drop" / name).touch()
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({"dev": {"connect_url": stack.connect_url,
                                                "bootstrap_servers": stack.bootstrap_servers}}))  # fmt: skip
    lineup = Lineup(run_dir, stack.bootstrap_servers, stack.connect_url, 3, batch=100)
    page = LivePage(tmp_path / "page", stack)
    plane = ControlPlane(TOKEN, BUNDLES, stack.connect_url, clusters, overrides=page._overrides)
    client = ConnectClient(stack.connect_url)
    applied: list[str] = []
    try:
        for request in lineup.bundles("http://127.0.0.1:9/receiver", clusters):
            page.renders_as(request)
            applied += bundle_ops.apply_data(request)["written"]
        rows = {r["bundle"]: r for r in bundle_rows(plane, lambda: KafkaContext(stack.bootstrap_servers), "dev")}
        shown = {b: (r["sync"], r.get("error"), r.get("drift")) for b, r in rows.items()}
        assert shown["payments-ingest"] == (IN_SYNC, None, []), shown
        assert shown["outbox-sink"] == (IN_SYNC, None, []), shown
        changed = sorted(applied)[0]
        config = client.connector_config(changed)
        client.put_connector_config(changed, {**config, "tasks.max": str(int(config.get("tasks.max", "1")) + 1)})
        rows = {r["bundle"]: r for r in bundle_rows(plane, lambda: KafkaContext(stack.bootstrap_servers), "dev")}
        drifted = [rows[b] for b in ("payments-ingest", "outbox-sink") if rows[b]["sync"] == DRIFTED]  # the demo's
        assert [d["name"] for r in drifted for d in r["drift"]] == [changed], rows
        assert [c["key"] for c in drifted[0]["drift"][0]["changes"]] == ["tasks.max"], drifted
    finally:
        for name in applied:
            client.delete_connector(name)

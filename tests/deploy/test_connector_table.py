"""The connectors view at scale: one Connect read per interval for every viewer, a bounded wait, and pages.

The pure paging and the reader with fakes first; then the real server against the shared stack's Connect
worker, with 60 STOPPED connectors (they cost nothing) under a bundle's owner prefix."""

from __future__ import annotations

import re
import secrets
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from connectors.render import RenderedBundle, load_bundle, render_bundle
from deploy.connect_rest import ConnectClient
from deploy.reconcile import LiveConnector
from deploy.serve.page.connector_table import (
    FRESH_SECONDS,
    PAGE_SIZE,
    UNBUNDLED,
    ConnectorTable,
    Row,
    Table,
    fingerprint,
    page_of,
)
from deploy.serve.service import ControlPlane
from ikkai.errors import IkkaiError
from ikkai.settings import Endpoints
from tests.deploy.serving import serve

SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"
BUNDLE = "payments-ingest"
TOKEN = "table-token-" + secrets.token_urlsafe(32)  # over 128 bits, as `ikkai serve` asks


def table_of(names: Sequence[str], state: str = "RUNNING") -> Table:
    return Table(0.0, tuple(Row("b", {"name": n, "state": state}) for n in names))


def test_pages_cut_the_rows_without_overlap_and_clamp_the_number() -> None:
    table = table_of([f"c{i:03d}" for i in range(120)])
    first, second, last = (page_of(table, n, 50) for n in (1, 2, 3))
    assert (first.pages, first.total, len(first.rows), len(second.rows), len(last.rows)) == (3, 120, 50, 50, 20)
    names = [r.connector["name"] for p in (first, second, last) for r in p.rows]
    assert names == [f"c{i:03d}" for i in range(120)]  # every row once, in order
    assert page_of(table, 99, 50).number == 3 and page_of(table, 0, 50).number == 1
    assert page_of(table_of([]), 1, 50).pages == 1


def test_the_filter_matches_part_of_the_name_and_the_exact_state() -> None:
    table = Table(0.0, (*table_of(["pay-a", "pay-b", "refund-a"]).rows, Row("b", {"name": "pay-c", "state": "FAILED"})))
    assert [r.connector["name"] for r in page_of(table, 1, 50, name="PAY").rows] == ["pay-a", "pay-b", "pay-c"]
    found = page_of(table, 1, 50, name="pay", state="failed")
    assert ([r.connector["name"] for r in found.rows], found.total, found.all_rows) == (["pay-c"], 1, 4)


def test_a_bundle_is_rendered_again_only_when_one_of_its_files_changed(tmp_path: Path) -> None:
    shutil.copytree(SHIPPED / BUNDLE, tmp_path / BUNDLE)
    before = fingerprint(tmp_path / BUNDLE)
    assert fingerprint(tmp_path / BUNDLE) == before and "values/dev.yaml" in {name for name, _, _ in before}
    values = tmp_path / BUNDLE / "values" / "dev.yaml"
    values.write_text(values.read_text() + "\n# one more line\n")
    assert fingerprint(tmp_path / BUNDLE) != before


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_bundle(tmp_path: Path) -> RenderedBundle:
    shutil.copytree(SHIPPED / BUNDLE, tmp_path / BUNDLE)
    return render_bundle(load_bundle(tmp_path / BUNDLE), "dev", ())


def shaped(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": r["name"], "state": r["state"]} for r in rows]


def test_every_viewer_in_the_interval_gets_the_same_read(tmp_path: Path) -> None:
    bundle, clock, asked = fake_bundle(tmp_path), Clock(), []

    def live() -> Mapping[str, LiveConnector]:
        asked.append(clock.now)
        return {f"{bundle.owner_prefix}payments": LiveConnector({}, {"connector": {"state": "RUNNING"}, "tasks": []})}

    table = ConnectorTable(live, lambda: {BUNDLE: bundle}, shaped, clock)
    seen = [table.table(wait=30) for _ in range(5)]
    assert len(asked) == 1 and all(t is seen[0] for t in seen)
    assert seen[0] is not None
    assert [(r.connector["name"], r.connector["state"]) for r in seen[0].rows] == [
        (f"{bundle.owner_prefix}payments", "RUNNING"), (f"{bundle.owner_prefix}refunds", "ABSENT")
    ]  # fmt: skip
    clock.now += FRESH_SECONDS
    table.table(wait=30)
    assert len(asked) == 2


def test_a_slow_connect_costs_a_viewer_its_wait_then_the_last_table(tmp_path: Path) -> None:
    bundle, clock, release, calls = fake_bundle(tmp_path), Clock(), threading.Event(), []

    def live() -> Mapping[str, LiveConnector]:
        calls.append(1)
        if len(calls) > 1:
            assert release.wait(60)
        return {}

    table = ConnectorTable(live, lambda: {BUNDLE: bundle}, shaped, clock)
    first = table.table(wait=30)
    assert first is not None and not first.stale
    clock.now += FRESH_SECONDS
    try:
        late = [table.table(wait=0.05) for _ in range(3)]  # Connect hangs: each viewer gets the last table
        assert all(t is not None and t.stale and t.rows == first.rows for t in late)
        assert len(calls) == 2  # one read under way, not one per viewer
    finally:
        release.set()


def test_connect_unreachable_is_an_error_on_each_bundle(tmp_path: Path) -> None:
    bundle = fake_bundle(tmp_path)

    def live() -> Mapping[str, LiveConnector]:
        raise IkkaiError("Connect at http://x unreachable: refused", fix="is it up?")

    broken = IkkaiError("bundle other: no values")
    read = ConnectorTable(live, lambda: {BUNDLE: bundle, "other": broken}, shaped, Clock()).table(wait=30)
    assert read is not None and read.rows == ()
    assert read.errors == {
        BUNDLE: "Connect at http://x unreachable: refused: is it up?",
        UNBUNDLED: "Connect at http://x unreachable: refused: is it up?",  # the connectors in no bundle: unknown too
        "other": "bundle other: no values",
    }


@pytest.fixture
def crowded(stack: Endpoints, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The real server over a bundle whose owner prefix holds 60 STOPPED leftovers on the stack's worker."""
    prefix = f"table-{uuid.uuid4().hex[:8]}."
    shutil.copytree(SHIPPED / BUNDLE, tmp_path / BUNDLE)
    manifest = yaml.safe_load((tmp_path / BUNDLE / "bundle.yaml").read_text())
    manifest["owner_prefix"] = prefix
    (tmp_path / BUNDLE / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    client = ConnectClient(stack.connect_url)
    config = {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
              "file": str(tmp_path / "none.jsonl"), "topic": f"{prefix}load"}  # fmt: skip
    names = [f"{prefix}load-{i:03d}" for i in range(60)]
    try:
        for name in names:
            client.create_connector(name, config, initial_state="STOPPED")
        # Connect leaves a just-created connector out of the expanded list while it cannot expand it yet (it logs
        # "Unable to get connector info for ... on this worker" and skips it): the page shows it on its next
        # refresh; the test waits until Connect lists all 60.
        give_up_at = time.monotonic() + 60
        while not set(names) <= set(client.connectors_expanded()) and time.monotonic() < give_up_at:
            time.sleep(0.2)
        assert set(names) <= set(client.connectors_expanded()), "Connect never listed every created connector"
        yield from ((url, prefix) for url in serve(ControlPlane(TOKEN, tmp_path, connect_url=stack.connect_url)))
    finally:
        for name in set(names) & set(client.connectors()):
            client.delete_connector(name)


def shown(page: str) -> list[str]:
    return re.findall(r'<tr class="connector" data-connector="([^"]+)"', page)


@pytest.mark.integration
def test_page_two_shows_the_connectors_page_one_does_not(crowded: tuple[str, str]) -> None:
    url, prefix = crowded
    session = requests.Session()
    session.headers["Origin"] = url  # as a browser sends it with a form
    assert session.post(f"{url}/ui/login", data={"token": TOKEN}, timeout=30).status_code == 200
    view = f"{url}/ui/env/dev/connectors"
    # The prefix's: the shared stack may run other tests' connectors, listed too (in no bundle of this page).
    one, two = (session.get(view, params={"page": n, "name": prefix}, timeout=30).text for n in (1, 2))
    # 60 live leftovers under the prefix and the bundle's own two connectors (not created: ABSENT).
    assert re.search(r'<span id="connector-count">(\d+)</span>', one).group(1) == "62"  # type: ignore[union-attr]
    assert len(shown(one)) == PAGE_SIZE and len(shown(two)) == 62 - PAGE_SIZE
    assert not set(shown(one)) & set(shown(two))
    assert set(shown(one)) | set(shown(two)) == {f"{prefix}load-{i:03d}" for i in range(60)} | {
        f"{prefix}payments", f"{prefix}refunds"
    }  # fmt: skip
    stopped = session.get(view, params={"state": "STOPPED", "name": "load-05"}, timeout=30).text
    assert shown(stopped) == [f"{prefix}load-05{i}" for i in range(10)]

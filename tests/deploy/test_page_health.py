"""The page's exactly-once health view (``/ui/env/<env>/health``) over the real server and the real broker: the
last marker of each partition of a query, a transaction left open on one, and a cluster that does not answer
(no stack needed for that one). The reader's own tests, pure and on
the broker, are test_eos_health.py; the view in a browser, with its screenshot, is in test_page_browser.py."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests
import yaml

from deploy.service import ControlPlane
from ikkai.contract.codec import default_codec
from tests.deploy.serving import serve
from tests.deploy.test_eos_health import marker, new_query, write_markers
from tests.deploy.test_page import SHIPPED, TOKEN, logged_in
from tests.kafka_helpers import transactional_producer

ENV = "dev"


class Cells(HTMLParser):
    """Each health row of the page as {css class of a cell: its text}, keyed by (query section id, partition)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str], dict[str, str]] = {}
        self.section, self.row, self.cell = "", None, ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "section":
            self.section = attr.get("id") or ""
        elif tag == "tr" and attr.get("class") == "partition":
            self.row = self.rows.setdefault((self.section, attr.get("data-partition") or ""), {})
        elif tag == "td" and self.row is not None:
            self.cell = (attr.get("class") or "").split(" ")[0]
            self.row[self.cell] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self.row = None

    def handle_data(self, data: str) -> None:
        if self.row is not None and self.cell:
            self.row[self.cell] += data.strip()


def rows(html: str) -> dict[tuple[str, str], dict[str, str]]:
    parser = Cells()
    parser.feed(html)
    return parser.rows


def served(tmp_path: Path, bootstrap: str) -> Iterator[str]:
    """The page of a control plane whose environment ``dev`` names ``bootstrap`` as its Kafka cluster."""
    shutil.copytree(SHIPPED / "payments-ingest", tmp_path / "payments-ingest")
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({ENV: {"connect_url": "local", "bootstrap_servers": bootstrap}}))
    yield from serve(ControlPlane(TOKEN, tmp_path, connect_url="http://127.0.0.1:9", clusters=clusters))


@pytest.fixture
def url(tmp_path: Path, bootstrap: str) -> Iterator[str]:
    yield from served(tmp_path, bootstrap)


def test_an_unreachable_cluster_is_said_on_the_page_not_a_server_error(tmp_path: Path) -> None:
    for url in served(tmp_path, "127.0.0.1:9"):  # nothing listens on the discard port
        page = requests.get(f"{url}/ui/env/{ENV}/health", allow_redirects=False, timeout=10)
        assert (page.status_code, page.headers["location"]) == (303, "/ui/login")  # the login first
        session, _ = logged_in(url)
        page = session.get(f"{url}/ui/env/{ENV}/health", timeout=60)
        assert page.status_code == 200
        assert 'id="health-error"' in page.text and "commit markers unreadable" in page.text
        assert f'href="/ui/env/{ENV}/health"' in page.text  # in the navigation like the other views


@pytest.mark.integration
def test_the_view_shows_each_partitions_last_marker_and_an_open_transaction(url: str, bootstrap: str) -> None:
    app, name, topic = new_query(bootstrap)
    write_markers(bootstrap, topic, [marker(b, 0, app, name) for b in range(3)] + [marker(0, 1, app, name)])
    stranger = transactional_producer(bootstrap, f"{app}.stranger")
    stranger.begin_transaction()
    stranger.produce(topic, key=b"x", value=marker(1, 1, app, name).encode(default_codec()), partition=1)
    stranger.flush(30)
    try:
        session, _ = logged_in(url)
        page = session.get(f"{url}/ui/env/{ENV}/health", timeout=60)
        assert page.status_code == 200, page.text
    finally:
        stranger.abort_transaction(60)
    shown = rows(page.text)
    section = f"query-{app}.{name}"
    p0, p1 = shown[(section, "0")], shown[(section, "1")]
    assert (p0["batch"], p0["offsets"], p0["records"], p0["transaction"]) == ("2", "events.payments 0:200 1:100",
                                                                              "20", "")  # fmt: skip
    assert re.fullmatch(r"\d+", p0["age"]) and int(p0["age"]) < 3600
    assert p0["ends"] == "6 / 6"
    assert p1["batch"] == "0" and re.fullmatch(r"open for \d+ s", p1["transaction"])
    assert p1["ends"] == "2 / 3"  # the open transaction's record sits beyond the read_committed end

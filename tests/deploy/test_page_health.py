"""The page's exactly-once health view (``/ui/env/<env>/health``) over the real server and the real broker: the
last marker of each partition of a query, a transaction left open on one, and a cluster that does not answer
(no stack needed for that one); and, over a reader that answers a fixed sample (no stack), the consumer lag,
the dead letters by reason (masked) and the reconciliation's counts as the page prints them. The readers' own
tests, pure and on the broker, are test_eos_health.py, test_consumer_lag.py, test_dead_letter_reasons.py and
test_reconciliation.py; the view in a browser, with its screenshot, is in test_page_browser.py."""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from confluent_kafka import KafkaException
from prometheus_client.parser import text_string_to_metric_families

from deploy.eos_view.consumer_lag import ConsumerLag, Lags, PartitionLag
from deploy.eos_view.dead_letter_reasons import DeadLetters, ReasonCount
from deploy.eos_view.event_decisions import EventDecisions
from deploy.eos_view.health import Health, HealthReader, health_of
from deploy.eos_view.reconciliation import Reconciliation, RequestSeen
from deploy.serve.service import ControlPlane
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import transactional_producer
from tests.deploy.serving import serve
from tests.deploy.test_eos_health import marker, new_query, write_markers
from tests.deploy.test_page import SHIPPED, TOKEN, logged_in
from tests.deploy.test_page_browser import chromium

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


def served(tmp_path: Path, bootstrap: str, health_seconds: float | None = None) -> Iterator[str]:
    """The page of a control plane whose environment ``dev`` names ``bootstrap`` as its Kafka cluster
    (``health_seconds``: with its background sampler, as ``ikkai serve`` and the demo run it)."""
    shutil.copytree(SHIPPED / "payments-ingest", tmp_path / "payments-ingest")
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({ENV: {"connect_url": "local", "bootstrap_servers": bootstrap}}))
    plane = ControlPlane(TOKEN, tmp_path, connect_url="http://127.0.0.1:9", clusters=clusters,
                         health_seconds=health_seconds)  # fmt: skip
    try:
        yield from serve(plane)
    finally:
        plane.stopping.set()  # its sampler, if any


@pytest.fixture
def url(tmp_path: Path, bootstrap: str) -> Iterator[str]:
    yield from served(tmp_path, bootstrap)


class Texts(HTMLParser):
    """The text of every element with an id, by that id (nested ids each get their own text too)."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str | None] = []
        self.text: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "img", "input", "meta", "link"):
            return
        found = dict(attrs).get("id")
        self.open.append(found)
        if found:
            self.text[found] = ""

    def handle_endtag(self, tag: str) -> None:
        if self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        for element in self.open:
            if element:
                self.text[element] += " ".join(data.split()) + " "


def texts(html: str) -> dict[str, str]:
    parser = Texts()
    parser.feed(html)
    return {k: " ".join(v.split()) for k, v in parser.text.items()}


PAN = "4111111111111111"
SAMPLE = replace(
    health_of(time.time(), {}, {}, {}, {}),
    lags=Lags(
        (ConsumerLag("query", "ikkai.infer", (PartitionLag("events.payments", 0, 130, 120),
                                              PartitionLag("events.payments", 1, 9, None))),),
        (ConsumerLag("sink", "outbox-sink", (PartitionLag("outbox.requests", 0, 12, 12),), "STABLE"),),
    ),
    dead_letters=DeadLetters((ReasonCount("dlq.enrich", "enrich", "invalid_field", 7, "card ************1111 refused",
                                          int(time.time() * 1000)),)),
    reconciliation=Reconciliation(requests=40, receipts=41, repeated=(("a" * 64, "hold"),), repeat_receipts=2,
                                  judged=30, in_flight=9, not_judged=1, undecodable=0, missing=(
        RequestSeen("b" * 64, f"payments-api/cards/{PAN}", "payments-api", int(time.time() * 1000) - 90_000,
                    ("outbox.requests", 1, 17)),
    )),
    event_decisions=EventDecisions(events=600, decisions=580, judged=570, in_flight=28, not_judged=2,
                                   without=((1, 17), (3, 4)), twice=(), source_topic="events.payments"),
)  # fmt: skip


class SampleReader(HealthReader):
    def sampled(self) -> Health:
        return SAMPLE


def test_the_view_prints_lag_dead_letters_by_reason_and_the_reconciliation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("deploy.serve.page.environment_readers.HealthReader", SampleReader)
    for url in served(tmp_path, "127.0.0.1:9"):
        session, _ = logged_in(url)
        page = session.get(f"{url}/ui/env/{ENV}/health", timeout=60)
    assert page.status_code == 200, page.text
    shown = texts(page.text)
    assert shown["lag-query-ikkai.infer"].startswith("query ikkai.infer · lag 10 ")
    assert "events.payments 0 130 120 10" in shown["lag-query-ikkai.infer"]
    assert "events.payments 1 9 nothing yet" in shown["lag-query-ikkai.infer"]
    assert shown["lag-sink-outbox-sink"].startswith("sink outbox-sink group STABLE · lag 0 ")
    assert "dlq.enrich enrich invalid_field 7 0 card ************1111 refused" in shown["dead-letter-reasons"]
    assert shown["effects-repeated"].endswith("1 aaaaaaaaaaaaaaaa… hold")
    missing = shown["requests-without-receipt"]
    assert missing.startswith(
        "requests without a final receipt (committed by the sink, or older than 60 s) 1 bbbbbbbbbbbbbbbb… "
    )
    assert "at outbox.requests-1@17, 90 s old" in missing
    assert PAN not in page.text and "************1111" in missing  # the effect's path is masked too
    assert shown["requests-judged"].endswith("30 / 9 / 1")
    assert shown["repeat-receipts"].endswith("2")
    assert shown["events-without-decision"] == "events of events.payments without a decision 2 1@17, 3@4"
    assert shown["events-decided-twice"] == "events decided twice 0"
    assert shown["events-judged"].endswith("570 / 28 / 2")
    assert 'class="count should-be-zero nonzero" id="effects-repeated"' in page.text  # a non-zero "should be 0"
    assert 'class="count should-be-zero" id="events-decided-twice"' in page.text  # a zero one: not highlighted


def test_an_unreachable_cluster_is_said_on_the_page_not_a_server_error(tmp_path: Path) -> None:
    for url in served(tmp_path, "127.0.0.1:9"):  # nothing listens on the discard port
        page = requests.get(f"{url}/ui/env/{ENV}/health", allow_redirects=False, timeout=10)
        assert page.status_code == 303 and page.headers["location"].startswith("/ui/login?")  # the login first
        session, _ = logged_in(url)
        page = session.get(f"{url}/ui/env/{ENV}/health", timeout=60)
        assert page.status_code == 200
        assert 'id="health-error"' in page.text and "commit markers unreadable" in page.text
        assert f'href="/ui/env/{ENV}/health"' in page.text  # in the navigation like the other views


@pytest.mark.integration
def test_the_view_shows_each_partitions_last_marker_and_an_open_transaction(url: str, cluster: KafkaContext) -> None:
    app, name, topic = new_query(cluster.bootstrap_servers)
    write_markers(cluster, topic, [marker(b, 0, app, name) for b in range(3)] + [marker(0, 1, app, name)])
    stranger = transactional_producer(cluster, f"{app}.stranger")
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


HELD = 5.0  # seconds the transaction below is held open before anyone looks


def exported_for(url: str, labels: dict[str, str], metric: str) -> float | None:
    """The value ``/metrics`` shows for ``metric`` with exactly ``labels``; None while it shows none."""
    text = requests.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).text
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples
             if s.name == metric and s.labels == labels]  # fmt: skip
    return found[0] if found else None


def test_the_view_says_in_a_browser_how_often_it_is_sampled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The help under the title names the sampling the view gets: every ``--health-interval`` in the background
    (20 s by default, in ``ikkai serve`` and the demo's page), else on a view once the last sample is 5 s old. It
    said "at most every 5 s" under both. Read in Chromium, as a person reads it (no stack: a fixed sample)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    monkeypatch.setattr("deploy.serve.page.environment_readers.HealthReader", SampleReader)
    driver: Any = chromium()
    said = {}
    try:
        for every in (20.0, None):
            for url in served(tmp_path / str(every), "127.0.0.1:9", health_seconds=every):
                driver.delete_all_cookies()
                driver.get(f"{url}/ui/env/{ENV}/health")
                driver.find_element(By.ID, "token").send_keys(TOKEN)
                driver.find_element(By.ID, "log-in").click()
                WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "reconciliation-counts"))
                said[every] = driver.find_element(By.CSS_SELECTOR, "main p.help").text
    finally:
        driver.quit()
    assert " Sampled every 20 s by this server in the background, whether or not anyone looks, " in said[20.0], said
    assert " Sampled by this server when a view asks and the last sample is 5 s old, " in said[None], said


@pytest.mark.integration
def test_health_is_sampled_with_nobody_looking_so_the_first_view_and_metrics_know_how_long_it_was_open(
    tmp_path: Path, cluster: KafkaContext
) -> None:
    app, name, topic = new_query(cluster.bootstrap_servers)
    write_markers(cluster, topic, [marker(0, 0, app, name), marker(0, 1, app, name)])
    shutil.copytree(SHIPPED / "payments-ingest", tmp_path / "payments-ingest")
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({ENV: {"connect_url": "local", "bootstrap_servers": cluster.bootstrap_servers}}))
    plane = ControlPlane(TOKEN, tmp_path, connect_url="http://127.0.0.1:9", clusters=clusters, health_seconds=1.0)
    stranger = transactional_producer(cluster, f"{app}.stranger")
    stranger.begin_transaction()
    stranger.produce(topic, key=b"x", value=marker(1, 1, app, name).encode(default_codec()), partition=1)
    stranger.flush(30)
    labels = {"env": ENV, "app": app, "query": name}
    try:
        for url in serve(plane):
            exported = functools.partial(exported_for, url, labels)
            give_up = time.monotonic() + 120
            while (exported("ikkai_eos_transaction_open_seconds") or 0) < HELD:  # nobody has looked at the page
                assert time.monotonic() < give_up, "the sampler never exported the open transaction"
                time.sleep(0.5)
            session, _ = logged_in(url)
            page = session.get(f"{url}/ui/env/{ENV}/health", timeout=60)  # the first view
            assert page.status_code == 200, page.text
            assert exported("ikkai_eos_transactions_open") == 1
            assert exported("ikkai_eos_transactions_stuck") == 0
            assert (exported("ikkai_eos_last_commit_age_seconds") or -1) >= 0
    finally:
        plane.stopping.set()
        with contextlib.suppress(KafkaException):  # past transaction.timeout.ms the broker aborted it already
            stranger.abort_transaction(60)
    p1 = rows(page.text)[(f"query-{app}.{name}", "1")]
    opened = re.fullmatch(r"open for (\d+) s", p1["transaction"])
    assert opened is not None and int(opened.group(1)) >= HELD, p1["transaction"]

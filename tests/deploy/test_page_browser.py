"""The operator page in a real headless browser against a real stack: login, CSRF, the views, a kill -9.

Chromium and its chromedriver come from Debian's packages (``.ci/run`` installs them; nothing is
downloaded): Selenium drives them over WebDriver. A missing browser fails the module with what to
install, never a skip. One browser and one embedded stack (its own: the test kills its Connect
worker) serve the whole module; each view's screenshot is written under the module's tmp folder.
"""

from __future__ import annotations

import re
import secrets
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from deploy.connect_rest import ConnectClient
from deploy.serve.page import REFRESH_SECONDS
from deploy.serve.service import ControlPlane
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext, ensure_topics
from ikkai.contract.markers import CommitMarker, commits_topic_for
from ikkai.contract.outbox import OutboxRequest, Receipt
from ikkai.contract.topics import (
    DECISIONS_FRAUD,
    DLQ_ENRICH,
    EVENTS_PAYMENTS,
    INGEST_PAYMENTS,
    OUTBOX_RECEIPTS,
    OUTBOX_REQUESTS,
)
from ikkai.settings import Endpoints
from spark_jobs.sink.commit_markers import ensure_commits_topic
from stack.kit.topic_io import transactional_producer
from stack.local_stack import CONNECT, LocalStack
from tests.deploy.serving import serve
from tests.deploy.test_eos_health import write_markers

pytestmark = pytest.mark.integration

TOKEN = "browser-token-" + secrets.token_urlsafe(32)  # over 128 bits, as `ikkai serve` asks
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"
BUNDLE, ENV = "payments-ingest", "ci"
OWNER = "payments team (#payments-oncall)"
SIZE = (1100, 640)  # small screenshots (the docs carry one of each view)


@dataclass
class Page:
    driver: object  # selenium.webdriver.Chrome (imported inside the fixture: a clear failure when it is missing)
    url: str
    local: LocalStack
    prefix: str
    shots: Path
    payments: Path  # the file the bundle's payments source reads into ingest.payments

    def open(self, path: str) -> None:
        self.driver.get(f"{self.url}{path}")  # type: ignore[attr-defined]

    def text(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        return " ".join(e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css))  # type: ignore[attr-defined]

    def wait(self, seconds: float, condition: Callable[[], bool], what: str) -> None:
        """Until ``condition`` holds (the page reloads itself meanwhile); fail saying ``what`` did not show."""
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            stale = (StaleElementReferenceException,)
            waiting = WebDriverWait(self.driver, seconds, poll_frequency=0.5, ignored_exceptions=stale)
            waiting.until(lambda _: condition())
        except TimeoutException:
            self.shot("timeout")
            pytest.fail(f"{what} did not show within {seconds} s; the page said: {self.text('main')[:2000]}")

    def shot(self, name: str, whole: bool = False) -> Path:
        """The window's screenshot; ``whole``: of the whole page, the window made as tall as it for the shot."""
        path = self.shots / f"{name}.png"
        if whole:  # the window's height is the page's plus the browser's own (toolbars, even when headless)
            height = self.driver.execute_script(  # type: ignore[attr-defined]
                "return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight"
            )
            self.driver.set_window_size(SIZE[0], max(SIZE[1], int(height) + 20))  # type: ignore[attr-defined]
        try:
            assert self.driver.save_screenshot(str(path)), path  # type: ignore[attr-defined]
        finally:
            if whole:
                self.driver.set_window_size(*SIZE)  # type: ignore[attr-defined]
        return path

    def log_in(self) -> None:
        """Log in with the server's token through the login form, as a user would (again, if already logged in)."""
        from selenium.webdriver.common.by import By

        self.open("/ui/login")
        self.driver.find_element(By.ID, "token").send_keys(TOKEN)  # type: ignore[attr-defined]
        self.driver.find_element(By.ID, "log-in").click()  # type: ignore[attr-defined]
        self.wait(60, lambda: self.driver.current_url.endswith(f"/ui/env/{ENV}/connectors"), "the connectors view")  # type: ignore[attr-defined]

    def post(self, path: str, form: dict[str, str]) -> int:
        """A same-origin fetch POST from the page (it carries the session cookie, as a form would): its status."""
        script = (
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {method: 'POST', body: new URLSearchParams(arguments[1]), redirect: 'manual'})"
            ".then(r => done(r.status), e => done(String(e)));"
        )
        return int(self.driver.execute_async_script(script, f"{self.url}{path}", form))  # type: ignore[attr-defined]


def chromium(*flags: str) -> object:
    """Headless Chromium under Selenium, with Chromium's own command-line ``flags`` added."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"no {' and no '.join(missing)}: the page's browser tests need Debian's chromium and its driver "
                    "(apt-get install -y chromium chromium-driver; .ci/run installs them)")  # fmt: skip
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        pytest.fail(f"selenium is not installed ({exc}): pip install -e '.[test]'")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={SIZE[0]},{SIZE[1]}", *flags):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))


@pytest.fixture(scope="module")
def page(own_stack: tuple[LocalStack, Endpoints], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    local, endpoints = own_stack
    prefix = f"page-{uuid.uuid4().hex[:8]}."
    bundles = tmp_path_factory.mktemp("page-bundles")
    shutil.copytree(SHIPPED / BUNDLE, bundles / BUNDLE)
    manifest = yaml.safe_load((bundles / BUNDLE / "bundle.yaml").read_text())
    manifest["owner_prefix"] = prefix
    manifest["owner"] = OWNER
    (bundles / BUNDLE / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    sources = {}
    for source in ("payments", "refunds"):
        (bundles / f"{source}.jsonl").touch()
        sources[source] = {"file": str(bundles / f"{source}.jsonl"), "topic": f"ingest.{source}.{prefix}"}
    sources["payments"]["topic"] = INGEST_PAYMENTS  # the flow view's first stage (the stack is the module's own)
    (bundles / BUNDLE / "values" / f"{ENV}.yaml").write_text(yaml.safe_dump({"sources": sources}))
    clusters = bundles / "clusters.yaml"  # where the flow view finds the environment's Kafka cluster
    cluster = {"connect_url": "local", "bootstrap_servers": endpoints.bootstrap_servers}
    clusters.write_text(yaml.safe_dump({ENV: cluster}))
    shots = tmp_path_factory.mktemp("page-screenshots")
    sys.stderr.write(f"\npage screenshots in {shots}\n")
    driver = chromium()
    try:
        for url in serve(ControlPlane(TOKEN, bundles, connect_url=endpoints.connect_url, clusters=clusters)):
            yield Page(driver, url, local, prefix, shots, bundles / "payments.jsonl")
    finally:
        driver.quit()  # type: ignore[attr-defined]
        client = ConnectClient(endpoints.connect_url)
        for name in client.connectors():
            if name.startswith(prefix):
                client.delete_connector(name)


@pytest.fixture
def logged_in(page: Page) -> None:
    """The module's browser logged in: a test that needs the login does not count on an earlier test's (run
    alone with ``-k`` there is none)."""
    page.log_in()


def test_the_page_refuses_actions_without_login_and_without_csrf(page: Page) -> None:
    page.open(f"/ui/env/{ENV}/connectors")
    assert page.driver.current_url.endswith(f"/ui/login?next=%2Fui%2Fenv%2F{ENV}%2Fconnectors")  # type: ignore[attr-defined]
    page.shot("login")
    action = f"/ui/env/{ENV}/bundles/{BUNDLE}/apply"
    assert page.post(action, {}) == 403  # no session at all
    from selenium.webdriver.common.by import By

    page.driver.find_element(By.ID, "token").send_keys("not-our-token-xxxxxxxx")  # type: ignore[attr-defined]
    page.driver.find_element(By.ID, "log-in").click()  # type: ignore[attr-defined]
    page.wait(30, lambda: "not a token of this server" in page.text("#login-error"), "the refused login")
    page.log_in()
    assert page.post(action, {}) == 403 and page.post(action, {"csrf": "forged"}) == 403  # logged in, no CSRF
    assert "ABSENT" in page.text(".connector .state")  # and nothing was applied


def test_apply_from_the_page_then_both_views_show_it(page: Page) -> None:
    from selenium.webdriver.common.by import By

    page.open(f"/ui/env/{ENV}/bundles")  # read in the background: the view reloads itself until it has the rows
    page.wait(6 * REFRESH_SECONDS, lambda: page.text("#bundles .state") == "drifted", "the drifted bundle")
    assert [page.text(f"#bundles .count.{action}") for action in ("create", "update", "delete")] == ["2", "0", "0"]
    page.driver.find_element(By.CSS_SELECTOR, "tr.diff summary").click()  # type: ignore[attr-defined]
    assert f"create {page.prefix}payments" in page.text("tr.diff")  # the plan's diff, opened on click
    page.shot("bundles-drifted")
    page.driver.find_element(By.CSS_SELECTOR, f"tr.bundle[data-bundle='{BUNDLE}'] button").click()  # type: ignore[attr-defined]
    # With the form's CSRF token the action runs: apply waits for the connectors, then the page says so.
    page.wait(180, lambda: f"apply {BUNDLE}/{ENV}: done" in page.text("#flash"), "the apply's result")
    page.wait(
        3 * REFRESH_SECONDS, lambda: page.text(".connector .state") == "RUNNING RUNNING", "two RUNNING connectors"
    )
    page.shot("connectors")
    page.open(f"/ui/env/{ENV}/bundles")  # the apply expired the rows read before it
    page.wait(6 * REFRESH_SECONDS, lambda: page.text("#bundles .state") == "in sync", "the bundle in sync")
    assert page.text("#bundles .count.unchanged") == "2"
    assert page.text("#bundles .owner") == OWNER
    # The apply was recorded in the environment's Kafka (_ikkai.applies), as done from the page (no name was given
    # at the login), and the bundle renders now as it did then.
    last = page.text("#bundles .last-apply")
    assert " by ikkai serve page, " in last and last.endswith("as rendered now"), last
    page.shot("bundles")


def test_the_flow_view_counts_committed_records_into_the_first_stage(page: Page) -> None:
    page.open(f"/ui/env/{ENV}/flow")
    with page.payments.open("a") as f:
        f.writelines(f'{{"payment_id":"p-{i}","amount":{i}}}\n' for i in range(20))

    def ingested() -> int:
        end = page.text("tr.stage[data-stage='ingest'] .end")
        return int(end) if end.isdigit() else -1

    # 20 records, each in its own or a shared transaction: at least 20 offsets, at most one marker per record more.
    page.wait(6 * REFRESH_SECONDS, lambda: ingested() >= 20, "20 records in ingest.payments")
    assert ingested() <= 40
    with page.payments.open("a") as f:
        f.writelines(f'{{"payment_id":"q-{i}","amount":{i}}}\n' for i in range(20))

    def rate() -> float:
        shown = page.text("tr.stage[data-stage='ingest'] .rate")
        return float(shown) if shown else 0.0

    # Between two samples that both saw the topic, the new records show as a rate above zero.
    page.wait(6 * REFRESH_SECONDS, lambda: rate() > 0, "a rate into ingest.payments")
    chart = page.driver.execute_script(  # type: ignore[attr-defined]
        "const i = document.getElementById('flow-chart'); return i.complete && i.naturalWidth;"
    )
    assert chart > 0  # the chart came back as an SVG image (the session cookie went with the <img> request)
    page.shot("flow")


def test_a_kill_9_of_the_worker_shows_on_the_open_connectors_view(page: Page) -> None:
    page.open(f"/ui/env/{ENV}/connectors")
    assert page.text(".connector .state") == "RUNNING RUNNING"
    page.local.kill(CONNECT)
    try:
        # No navigation by the test from here: the view reloads itself every REFRESH_SECONDS.
        page.wait(3 * REFRESH_SECONDS, lambda: "unreachable" in page.text(f"#bundle-{BUNDLE} .unreachable"),
                  "Connect's absence")  # fmt: skip
        assert page.text(".connector .state") == ""
        page.shot("connectors-worker-killed")
    finally:
        page.local.start(CONNECT)
    page.wait(120, lambda: page.text(".connector .state") == "RUNNING RUNNING", "the connectors running again")
    page.shot("connectors-worker-back")


@pytest.mark.usefixtures("logged_in")
def test_the_health_view_shows_each_querys_last_markers_and_an_open_transaction(
    page: Page, own_stack: tuple[LocalStack, Endpoints]
) -> None:
    kafka = KafkaContext.recorded(own_stack[1])
    ensure_topics(kafka, [DLQ_ENRICH, EVENTS_PAYMENTS, DECISIONS_FRAUD, OUTBOX_REQUESTS, OUTBOX_RECEIPTS], 2)
    producer = Producer(kafka.producer_config())
    # Dead letters as enrich writes them, one quoting a card number: the view counts them and masks it. A
    # millisecond apart: keyless, they may land on either partition, and within one millisecond "newest" across
    # partitions has no answer (offsets of two partitions do not compare).
    written_at = int(time.time() * 1000)
    for i in range(3):
        reason = f"card_number 4111111111111111 is not a string ({page.prefix}{i})"
        producer.produce(DLQ_ENRICH, value=b"x", timestamp=written_at + i, headers=[("ikkai.dlq.stage", b"enrich"),
                         ("ikkai.dlq.error_class", b"wrong_type"), ("ikkai.dlq.reason", reason.encode())])  # fmt: skip
    # Two minutes old requests: one receipted twice (at least once), one not at all.
    codec, old = default_codec(), int(time.time() * 1000) - 120_000
    asked = [OutboxRequest(f"{page.prefix}d{i}", f"pay-{i}", "payments-api", "/holds", b"{}", 0, effect="hold")
             for i in range(2)]  # fmt: skip
    for request in asked:
        producer.produce(OUTBOX_REQUESTS, key=request.key, value=codec.encode("outbox_request", request.to_record()),
                         timestamp=old)  # fmt: skip
    done = Receipt(asked[0].decision_id, asked[0].key, "payments-api", "DELIVERED", 201, 1, old, old, None, None,
                   "hold", asked[0].idempotency_key)  # fmt: skip
    for _ in range(2):
        producer.produce(OUTBOX_RECEIPTS, key=done.decision_id, value=codec.encode("outbox_receipt", done.to_record()))
    producer.flush(30)
    queries = {"enrich": (INGEST_PAYMENTS, EVENTS_PAYMENTS), "infer": (EVENTS_PAYMENTS, DECISIONS_FRAUD)}
    for query, (source, output) in queries.items():
        ensure_commits_topic(kafka, commits_topic_for("ikkai", query), 2)
        write_markers(kafka, commits_topic_for("ikkai", query), [
            CommitMarker("ikkai", query, p, batch, 2, 40 + p, source, {0: 100 * batch + p, 1: 90 * batch},
                         output_topics=(output,), writer_version="fraud-v3" if query == "infer" else "enrich-1")
            for batch in range(1, 4) for p in range(2)
        ])  # fmt: skip
    stranger = transactional_producer(kafka, "not-the-writer")  # holds infer's partition 1 open
    stranger.begin_transaction()
    stranger.produce(commits_topic_for("ikkai", "infer"), key=b"x", value=b"x", partition=1)
    stranger.flush(30)
    try:
        page.open(f"/ui/env/{ENV}/health")
        assert page.text("section[data-query='enrich'] tr[data-partition='0'] .batch") == "3"
        offsets = page.text("section[data-query='enrich'] tr[data-partition='0'] .offsets")
        assert offsets == f"{INGEST_PAYMENTS} 0:300 1:270"  # the last of three batches
        assert page.text("section[data-query='enrich'] .transaction").strip() == ""  # nothing open there
        assert page.text("section[data-query='infer'] tr[data-partition='1'] .transaction").startswith("open for")
        # enrich's markers of its last batch name 300 (output partition 0) and 301 (1) for ingest.payments-0:
        # the query committed the highest, and its lag is counted from there
        lag = "section[data-kind='query'][data-name='ikkai.enrich'] tr[data-partition='0']"
        assert page.text(f"{lag} .committed") == "301"
        reason = page.text(f"tr.reason[data-topic='{DLQ_ENRICH}'][data-class='wrong_type'] .text")
        assert reason == f"card_number ************1111 is not a string ({page.prefix}2)"  # the newest, masked
        assert "4111111111111111" not in page.driver.page_source  # type: ignore[attr-defined]
        assert int(page.text("#requests-without-receipt .value")) >= 1  # the unreceipted one (others may be there)
        assert int(page.text("#repeat-receipts .value")) >= 1
        assert re.fullmatch(r"\d+ / \d+", page.text("#events-read .value"))  # infer's markers found, topics read
        # decision → receipt: the first receipt of the two came 120 s after its request (written two minutes back)
        assert sum(int(n) for n in page.text("#latency-buckets .receipted").split()) >= 1
        assert max(float(s) for s in page.text("#latency-buckets .receipted-p99").split()) >= 100
        chart = page.driver.execute_script(  # type: ignore[attr-defined]
            "const i = document.getElementById('latency-chart'); return i.complete && i.naturalWidth;"
        )
        assert chart > 0  # the latency chart came back as an SVG image
        page.shot("health", whole=True)
    finally:
        stranger.abort_transaction(60)
    page.wait(3 * REFRESH_SECONDS, lambda: page.text("section[data-query='infer'] .transaction").strip() == "",
              "the aborted transaction gone")  # fmt: skip

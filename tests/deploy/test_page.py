"""The operator page's login, session cookie and CSRF rule, over the real server (no Connect needed),
and the pure shaping of its rows. The browser tests against the real stack are test_page_browser.py."""

from __future__ import annotations

import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator
from html import unescape as html_unescape
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import pytest
import requests

from deploy.serve.audit import AUDIT, fingerprint
from deploy.serve.http import make_server
from deploy.serve.page.app import Page
from deploy.serve.page.session import IDLE_SECONDS, SessionStore
from deploy.serve.page.views import DRIFTED, IN_SYNC, bundle_row, connector_rows, environments, first_line
from deploy.serve.service import ControlPlane, ServeTLS, ServeTokens
from deploy.serve.throttle import MAX_FAILURES, WINDOW_SECONDS, FailureThrottle
from stack.stack_security import ensure_secrets
from tests.deploy.serving import serve
from tests.deploy.test_page_browser import chromium

TOKEN = "page-token-Rt6Yu1Io9Pa4Sd7Fg2Hj5Kl8Zx3Cv0Bn"  # noqa: S105 - a test's token, over 128 bits
DEV_ONLY = "dev-only-token-" + "y" * 16
SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"
ACTION = "/ui/env/dev/bundles/payments-ingest/restart"


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    shutil.copytree(SHIPPED / "payments-ingest", tmp_path / "payments-ingest")
    tokens = ServeTokens(((TOKEN, frozenset({"*"})), (DEV_ONLY, frozenset({"dev"}))))
    yield from serve(ControlPlane(tokens, tmp_path, connect_url="http://127.0.0.1:9"))


def post(
    url: str, path: str, form: dict[str, str], session: requests.Session | None = None, origin: str | None = ""
) -> requests.Response:
    """A form POST as a browser sends it: with the page's own ``Origin`` (``origin=None``: without one)."""
    headers = {} if origin is None else {"Origin": origin or url}
    return (session or requests).post(f"{url}{path}", data=form, headers=headers, allow_redirects=False, timeout=30)


def logged_in(url: str, token: str = TOKEN) -> tuple[requests.Session, str]:
    """A session after the login, and the CSRF token its pages carry."""
    session = requests.Session()
    session.headers["Origin"] = url  # as a browser sends it with every form it posts
    page = session.post(f"{url}/ui/login", data={"token": token}, timeout=30)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return session, found.group(1)


def test_pages_need_the_login_and_the_bearer_header_is_not_one(url: str) -> None:
    for headers in ({}, {"Authorization": f"Bearer {TOKEN}"}):
        page = requests.get(f"{url}/ui/env/dev/connectors", headers=headers, allow_redirects=False, timeout=5)
        assert (page.status_code, page.headers["location"]) == (303, "/ui/login?next=%2Fui%2Fenv%2Fdev%2Fconnectors")
        assert requests.post(f"{url}{ACTION}", headers=headers | {"Origin": url}, timeout=5).status_code == 403
    assert requests.get(f"{url}/ui/login", timeout=5).status_code == 200
    # The API is as it was: the bearer header, and nothing else, opens it.
    assert requests.get(f"{url}/bundles/payments-ingest/dev/plan", timeout=5).status_code == 401
    assert requests.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5).status_code == 200


def test_the_login_sets_a_signed_httponly_strict_cookie_and_refuses_a_wrong_token(url: str) -> None:
    wrong = post(url, "/ui/login", {"token": TOKEN + "z"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    right = post(url, "/ui/login", {"token": TOKEN})
    assert right.status_code == 303
    cookie = right.headers["set-cookie"].lower()
    name = f"ikkai_page_{url.rsplit(':', 1)[1]}"  # one name per server: two local servers keep their own
    assert cookie.startswith(f"{name}=") and "httponly" in cookie and "samesite=strict" in cookie
    assert "secure" not in cookie  # plain HTTP on loopback; over HTTPS the cookie is Secure
    assert TOKEN not in right.headers["set-cookie"]  # the session names environments, never the token
    forged = requests.get(
        f"{url}/ui/env/dev/connectors", cookies={name: right.cookies[name][:-2] + "xx"},
        allow_redirects=False, timeout=5,
    )  # fmt: skip
    assert forged.status_code == 303  # a cookie whose signature does not match is no session


def test_over_https_the_session_cookie_is_secure(tmp_path: Path) -> None:
    pki = ensure_secrets(tmp_path / "pki")
    pem = pki.connect_pem  # key and certificate in one file
    server = make_server(ControlPlane(TOKEN, tmp_path), tls=ServeTLS(pem, pem))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        at = f"https://127.0.0.1:{server.port}"
        login = requests.post(f"{at}/ui/login", data={"token": TOKEN}, headers={"Origin": at},
                              allow_redirects=False, verify=str(pki.ca), timeout=10)  # fmt: skip
        assert login.status_code == 303
        cookie = login.headers["set-cookie"].lower()
        assert "; secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    finally:
        server.shutdown()
        thread.join(30)
        server.server_close()


def test_every_action_needs_the_sessions_csrf_token(url: str) -> None:
    session, csrf = logged_in(url)
    _, someone_elses = logged_in(url)
    assert csrf != someone_elses
    for form in ({}, {"csrf": ""}, {"csrf": csrf + "x"}, {"csrf": someone_elses}):
        refused = session.post(f"{url}{ACTION}", data=form, allow_redirects=False, timeout=5)
        assert refused.status_code == 403, form
        assert "CSRF" in refused.text
    done = session.post(f"{url}{ACTION}", data={"csrf": csrf}, timeout=30)
    assert done.status_code == 200 and "restart payments-ingest/dev failed" in done.text  # Connect is not there
    assert session.post(f"{url}/ui/logout", data={}, timeout=5).status_code == 403
    assert session.post(f"{url}/ui/logout", data={"csrf": csrf}, timeout=5).url.endswith("/ui/login")
    assert session.post(f"{url}{ACTION}", data={"csrf": csrf}, timeout=5).status_code == 403  # logged out


def test_a_scoped_token_sees_and_acts_on_its_environments_only(url: str) -> None:
    session, csrf = logged_in(url, DEV_ONLY)
    assert "nav-prod-connectors" not in session.get(f"{url}/ui/env/dev/connectors", timeout=30).text
    assert session.get(f"{url}/ui/env/prod/connectors", timeout=5).status_code == 403
    prod_action = "/ui/env/prod/bundles/payments-ingest/apply"
    assert session.post(f"{url}{prod_action}", data={"csrf": csrf}, timeout=5).status_code == 403
    assert session.get(f"{url}/ui/env/nowhere/bundles", timeout=5).status_code == 403
    every, _ = logged_in(url)
    assert "nav-prod-connectors" in every.get(f"{url}/ui/env/dev/connectors", timeout=30).text


def test_environments_are_the_values_files_of_the_bundles(tmp_path: Path) -> None:
    for bundle, envs in {"a": ["dev", "prod"], "b": ["dev"], "c": []}.items():
        (tmp_path / bundle / "values").mkdir(parents=True)
        (tmp_path / bundle / "bundle.yaml").touch()
        for env in envs:
            (tmp_path / bundle / "values" / f"{env}.yaml").touch()
    (tmp_path / "not-a-bundle" / "values").mkdir(parents=True)
    (tmp_path / "not-a-bundle" / "values" / "qa.yaml").touch()
    assert environments(tmp_path) == {"dev": ["a", "b"], "prod": ["a"]}


def test_rows_show_drift_and_the_first_line_of_a_failure() -> None:
    change = {"key": "topic", "live": "a", "desired": "b"}
    plan = {
        "pending": True, "valid": True, "summary": {"update": 1, "unchanged": 1}, "unpruned": [],
        "connectors": [
            {"name": "x", "action": "update", "live_state": "RUNNING", "target_state": "running",
             "state_change": False, "changes": [change], "validation_errors": []},
            {"name": "y", "action": "unchanged", "live_state": "RUNNING", "target_state": "running",
             "state_change": False, "changes": [], "validation_errors": []},
        ],
    }  # fmt: skip
    row = bundle_row("b", plan)
    assert row["sync"] == DRIFTED and [c["name"] for c in row["drift"]] == ["x"]
    assert row["drift"][0]["changes"] == [change]
    assert bundle_row("b", {**plan, "pending": False})["sync"] == IN_SYNC
    trace = "\norg.apache.kafka.connect.errors.ConnectException: boom\n\tat Foo.bar(Foo.java:1)\n"
    assert first_line(trace) == "org.apache.kafka.connect.errors.ConnectException: boom"
    assert first_line(None) is None
    task = {"id": 0, "state": "FAILED", "worker": "w:1", "trace": trace}
    connector = {"name": "x", "state": "FAILED", "target_state": "running", "worker": "w:1", "trace": trace}
    (shown,) = connector_rows({"connectors": [{**connector, "tasks": [task]}]}, {"x": 3})
    assert shown["restarts"] == 3 and shown["failure"].endswith("boom")
    assert shown["tasks"][0]["failure"].endswith("boom")


def test_too_many_failed_logins_from_one_address_are_refused_until_the_window_passes(url: str) -> None:
    for _ in range(MAX_FAILURES):
        assert post(url, "/ui/login", {"token": "guess-" + "g" * 20}).status_code == 401
    refused = post(url, "/ui/login", {"token": "guess-" + "g" * 20})
    assert refused.status_code == 429 and "set-cookie" not in refused.headers
    assert 0 < int(refused.headers["Retry-After"]) <= WINDOW_SECONDS and "too many failed logins" in refused.text
    # The right token is heard all the same: another local user's guesses (the same address) lock no one out.
    assert post(url, "/ui/login", {"token": TOKEN}).status_code == 303


def test_the_throttle_counts_failures_per_address_in_a_sliding_window_and_forgets_the_oldest_address() -> None:
    now = [1000.0]
    throttle = FailureThrottle(clock=lambda: now[0], max_failures=3, window_seconds=60, max_clients=2)
    for _ in range(3):
        assert throttle.wait_seconds("a") == 0
        throttle.failed("a")
        now[0] += 10
    assert throttle.wait_seconds("a") == 30  # the first failure (at 1000) is a window old at 1060; now 1030
    assert throttle.wait_seconds("b") == 0  # another address is not held
    now[0] = 1060
    assert throttle.wait_seconds("a") == 0  # the oldest failure left the window: one more try
    throttle.failed("a")
    assert throttle.wait_seconds("a") > 0
    for client in ("a", "b", "c"):
        for _ in range(3):
            throttle.failed(client)
    assert throttle.wait_seconds("a") == 0 and throttle.wait_seconds("c") > 0  # two addresses kept: "a" forgotten


EVIL = "payments-ingest.x/../../restart?"  # a name Connect accepts


def test_a_connector_name_cannot_turn_pause_into_another_action(url: str, tmp_path: Path) -> None:
    """The pause button of a connector named like a path goes to that connector's pause, not the bundle's restart."""
    session, csrf = logged_in(url)
    page = Page(ControlPlane(TOKEN, tmp_path))
    row = {"name": EVIL, "state": "RUNNING", "tasks": [], "restarts": 0}
    pager = {"name": "", "state": "", "total": 1, "all": 1, "number": 1, "pages": 1, "size": 50}
    html = page.templates.get_template("connectors.html").render(
        env="dev", view="connectors", bundles=[{"bundle": "payments-ingest", "connectors": [row]}], pager=pager,
        environments=["dev"], csrf=csrf, flash=None, refresh_seconds=5,
    )  # fmt: skip
    [action] = re.findall(r'action="([^"]*/pause)"', html)
    # As the browser resolves the action against the page's URL (dot segments removed, "?" starting a query).
    posted = urlsplit(urljoin(f"{url}/ui/env/dev/connectors", action))
    assert (posted.path, posted.query) == (
        f"/ui/env/dev/bundles/payments-ingest/connectors/{quote(EVIL, safe='')}/pause",
        "",
    )
    answer = session.post(f"{url}{posted.path}", data={"csrf": csrf}, timeout=30)
    flash = re.search(r'id="flash">([^<]*)<', answer.text)
    assert flash is not None, answer.text
    assert html_unescape(flash.group(1)) == f"{EVIL} is not a connector of payments-ingest/dev"  # pause's own check


def test_a_session_ends_at_logout_after_idling_and_at_its_age() -> None:
    now = [1000.0]
    store = SessionStore(clock=lambda: now[0], idle_seconds=60, max_seconds=600, max_sessions=2)
    sid = store.create(["dev"], who="token sha256:ab")
    assert store.get(sid) is not None and store.get("forged") is None
    now[0] += 59
    assert store.get(sid) is not None  # each request renews the idle time
    now[0] += 61
    assert store.get(sid) is None  # idle over 60 s
    sid = store.create(["dev"], who="x")
    store.end(sid)
    assert store.get(sid) is None  # logged out: the id is gone from the server
    aged = store.create(["dev"], who="x")
    for _ in range(20):
        now[0] += 50
        store.get(aged)
    assert store.get(aged) is None  # busy, but older than max_seconds
    first, second, third = (store.create(["dev"], who=str(i)) for i in range(3))
    assert store.get(first) is None and store.get(second) and store.get(third)  # the oldest goes first
    assert IDLE_SECONDS < 8 * 3600


def test_host_and_origin_are_checked_on_every_route(url: str) -> None:
    port = url.rsplit(":", 1)[1]
    for path in ("/healthz", "/ui", "/ui/login", "/metrics"):
        refused = requests.get(f"{url}{path}", headers={"Host": f"evil.example:{port}"}, allow_redirects=False,
                               timeout=10)  # fmt: skip
        assert refused.status_code == 421 and "location" not in refused.headers, path
    assert requests.get(f"{url}/healthz", headers={"Host": f"localhost:{port}"}, timeout=10).status_code == 200
    for origin in (None, "http://127.0.0.1:1", "null", f"http://evil.example:{port}"):
        assert post(url, "/ui/login", {"token": TOKEN}, origin=origin).status_code == 403, origin
    assert post(url, "/ui/login", {"token": TOKEN}).status_code == 303
    api = f"{url}/bundles/payments-ingest/dev/restart"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    foreign = requests.post(api, headers=bearer | {"Origin": "http://127.0.0.1:1"}, timeout=30)
    assert foreign.status_code == 403  # a page elsewhere may not drive the API either
    assert requests.post(api, headers=bearer, timeout=30).status_code == 422  # curl sends no Origin: Connect is absent


def test_every_login_failed_login_action_and_logout_is_an_audit_line(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT.name)
    assert post(url, "/ui/login", {"token": "guess-" + "g" * 20}).status_code == 401
    session, csrf = logged_in(url, DEV_ONLY)
    evil = 'x" who="forged'  # a name that tries to forge a field of its own
    action = f"/ui/env/dev/bundles/payments-ingest/connectors/{quote(evil, safe='')}/pause"
    session.post(f"{url}{action}", data={"csrf": csrf}, timeout=30)
    session.post(f"{url}{ACTION}", data={"csrf": csrf}, timeout=30)
    session.post(f"{url}/ui/logout", data={"csrf": csrf}, timeout=5)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    requests.post(f"{url}/bundles/payments-ingest/dev/restart", headers=bearer, timeout=30)
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT.name]
    who = fingerprint(DEV_ONLY)
    assert [line.split(" who=")[0] for line in lines] == [
        "login failed", "login", "page pause", "page restart", "logout", "api restart"
    ], lines  # fmt: skip
    assert f'login who="{who}" peer="127.0.0.1" env="dev"' in lines[1]
    assert f'page pause who="{who}" peer="127.0.0.1" env="dev"' in lines[2]
    assert 'connector="x\\" who=\\"forged"' in lines[2]  # the name's quotes stay escaped inside its own
    assert f'page restart who="{who}"' in lines[3] and 'bundle="payments-ingest"' in lines[3]
    assert f'api restart who="{fingerprint(TOKEN)}"' in lines[5] and "failed" in lines[5]
    assert TOKEN not in caplog.text and DEV_ONLY not in caplog.text


def test_the_bundles_view_shows_each_bundles_error_when_connect_is_unreachable(url: str) -> None:
    session, _ = logged_in(url)
    deadline = time.monotonic() + 30
    while 'data-bundle="payments-ingest"' not in (text := session.get(f"{url}/ui/env/dev/bundles", timeout=10).text):
        assert 'id="bundles-reading"' in text and time.monotonic() < deadline, text[-1500:]  # read in the background
        time.sleep(0.5)  # a reload's pace; the condition is polled
    row = text[text.index('data-bundle="payments-ingest"') :].split("</tr>")[0]
    assert 'class="state unknown"' in row and "http://127.0.0.1:9" in row and "unreachable" in row, row


def test_the_connectors_view_counts_nothing_when_connect_was_not_read(url: str) -> None:
    """With Connect unreachable the view said '0 connectors, page 1 of 1' above each bundle's error: a count of a
    table it never read. It says that nothing was counted. Read in Chromium, as a person reads it (no stack:
    nothing listens on the discard port)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver: Any = chromium()
    try:
        driver.get(f"{url}/ui/env/dev/connectors")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "log-in").click()
        waiting = WebDriverWait(driver, 60, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException,))
        waiting.until(lambda d: "unreachable" in " ".join(e.text for e in d.find_elements(By.CSS_SELECTOR, ".failure")))
        pager = driver.find_element(By.ID, "pager").text
    finally:
        driver.quit()
    assert pager == "Connect was not read: no connector counted (each bundle below says why)", pager

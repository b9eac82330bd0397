"""The operator page attacked from another local port and through DNS rebinding, in a real Chromium.

Another local user runs a web server on another port of 127.0.0.1 (``Other``, a plain ``http.server``):
cookies ignore ports, so the operator's browser sends it the page's session cookie, and its pages may
frame the page or post forms to it. A name that resolves to 127.0.0.1 (``evil.example``, mapped by
Chromium's ``--host-resolver-rules``, as a rebinding DNS server would answer) reaches the service from
the operator's own browser. The page is served as the demo serves it (``make_server``: 127.0.0.1, a
free port, plain HTTP); Connect is not needed (its address refuses), so no stack is started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from deploy.serve.service import ControlPlane
from tests.deploy.serving import serve
from tests.deploy.test_page_browser import SHIPPED, chromium

pytestmark = pytest.mark.integration

TOKEN = "f576e890cd8baf557a30ddcbbddc4759ea287727b7d83b02"  # noqa: S105 - a test's token, over 128 bits
ATTACKER = "8638bb0bbbaf9962466c3593da11f9ccba37b72e1645c772"  # another user's token of the same server
REBOUND = "evil.example"  # a name whose DNS answer is 127.0.0.1
BUNDLE, ENV = "payments-ingest", "dev"


@dataclass
class Other:
    """Another local user's web server: it serves the pages it is given and keeps the cookies it receives."""

    pages: dict[str, str] = field(default_factory=dict)
    cookies: list[str] = field(default_factory=list)
    port: int = 0


def other_server(other: Other) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            other.cookies.append(self.headers.get("Cookie", ""))
            body = other.pages.get(self.path, "nothing here").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    other.port = server.server_address[1]
    return server


@dataclass
class Browser:
    driver: object  # selenium.webdriver.Chrome
    url: str  # the page's server
    other: Other

    def open(self, url: str) -> None:
        self.driver.get(url)  # type: ignore[attr-defined]

    def ids(self, element_id: str) -> int:
        from selenium.webdriver.common.by import By

        return len(self.driver.find_elements(By.ID, element_id))  # type: ignore[attr-defined]

    def wait(self, condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            WebDriverWait(self.driver, seconds, poll_frequency=0.2).until(lambda _: condition())
        except TimeoutException:
            source = self.driver.page_source[:2000]  # type: ignore[attr-defined]
            pytest.fail(f"{what} did not happen within {seconds} s; the page: {source}")

    def log_in(self) -> str:
        """Log in through the form; the CSRF token the page's forms carry."""
        from selenium.webdriver.common.by import By

        self.open(f"{self.url}/ui/login")
        self.driver.find_element(By.ID, "token").send_keys(TOKEN)  # type: ignore[attr-defined]
        self.driver.find_element(By.ID, "log-in").click()  # type: ignore[attr-defined]
        self.wait(lambda: self.ids("nav-dev-connectors") == 1, "the login")
        csrf = self.driver.find_element(By.CSS_SELECTOR, "form.logout input[name=csrf]")  # type: ignore[attr-defined]
        return str(csrf.get_attribute("value"))

    def log_out(self) -> None:
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.CSS_SELECTOR, "form.logout button").click()  # type: ignore[attr-defined]
        self.wait(lambda: self.ids("token") == 1, "the logout")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    import shutil

    from deploy.serve.service import ServeTokens

    bundles = tmp_path_factory.mktemp("attack-bundles")
    shutil.copytree(SHIPPED / BUNDLE, bundles / BUNDLE)
    tokens = ServeTokens(((TOKEN, frozenset({"*"})), (ATTACKER, frozenset({ENV}))))
    other = Other()
    server = other_server(other)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    driver = chromium(f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1")
    try:
        for url in serve(ControlPlane(tokens, bundles, connect_url="http://127.0.0.1:9")):
            yield Browser(driver, url, other)
    finally:
        driver.quit()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


def session_cookie(header: str) -> tuple[str, str]:
    """The page's session cookie among those a Cookie header carries: (name, value)."""
    found = [c.strip().partition("=") for c in header.split(";") if c.strip().startswith("ikkai_page")]
    assert len(found) == 1, header
    return found[0][0], found[0][2]


def decoded(text: str) -> bytes:
    """``text`` read as URL-safe base64, as far as it is that; else nothing."""
    import base64
    import binascii

    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return b""


def test_a_page_on_another_port_cannot_frame_the_page(browser: Browser) -> None:
    browser.other.pages["/frame"] = f'<iframe id="framed" src="{browser.url}/ui/login"></iframe>'
    browser.open(f"http://127.0.0.1:{browser.other.port}/frame")
    from selenium.webdriver.common.by import By

    frame = browser.driver.find_element(By.ID, "framed")  # type: ignore[attr-defined]
    browser.driver.switch_to.frame(frame)  # type: ignore[attr-defined]
    try:

        def loaded() -> str:
            return str(browser.driver.execute_script("return document.readyState + ' ' + location.href"))  # type: ignore[attr-defined]

        browser.wait(
            lambda: loaded().startswith("complete ") and not loaded().endswith("about:blank"), "the frame's load"
        )
        assert browser.ids("token") == 0, "the login form was shown inside another port's frame"
        assert not loaded().endswith("/ui/login"), loaded()  # Chromium put its error page in the frame
    finally:
        browser.driver.switch_to.default_content()  # type: ignore[attr-defined]
    headers = requests.get(f"{browser.url}/ui/login", timeout=10).headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"


def test_a_captured_session_cookie_holds_no_csrf_token_and_is_refused_after_logout(browser: Browser) -> None:
    csrf = browser.log_in()
    # Cookies ignore ports: the operator's browser, on another local user's page, sends that user the cookie.
    browser.other.cookies.clear()
    browser.open(f"http://127.0.0.1:{browser.other.port}/ui/anything")

    def captured() -> list[str]:  # the page's request (Path /ui matches), not the favicon's (it does not)
        return [c for c in browser.other.cookies if "ikkai_page" in c]

    browser.wait(lambda: bool(captured()), "the other server's request with the cookie")
    name, value = session_cookie(captured()[-1])
    readable = decoded(value.split(".")[0])  # a signed cookie's payload is base64 before its first dot
    assert csrf not in value and csrf.encode() not in readable, "the cookie carries the CSRF token"
    view = f"{browser.url}/ui/env/{ENV}/connectors"

    def replayed(url: str) -> requests.Response:
        return requests.get(url, cookies={name: value}, allow_redirects=False, timeout=30)

    assert replayed(view).status_code == 200  # the capture is the live session (so its refusal below means logout)
    browser.open(view)
    browser.log_out()
    refused = replayed(view)
    assert refused.status_code == 303, refused.status_code  # to the login, which then lands on the view
    assert refused.headers.get("location", "").split("?")[0] == "/ui/login", refused.headers
    # Another ikkai server on another port with the same token never had this session.
    plane = ControlPlane(TOKEN, Path("/nonexistent"), connect_url="http://127.0.0.1:9")
    for other_url in serve(plane):
        assert replayed(f"{other_url}/ui/").status_code == 303


def test_a_login_form_posted_from_another_port_is_refused(browser: Browser) -> None:
    """Login CSRF: another user's page logs the operator in as that user (whose actions they then watch)."""
    browser.other.pages["/login"] = (
        f'<form id="f" method="post" action="{browser.url}/ui/login">'
        f'<input name="token" value="{ATTACKER}"></form><script>document.getElementById("f").submit()</script>'
    )
    browser.driver.delete_all_cookies()  # type: ignore[attr-defined]
    browser.open(f"http://127.0.0.1:{browser.other.port}/login")
    browser.wait(lambda: browser.driver.current_url.startswith(browser.url), "the form's post")  # type: ignore[attr-defined]
    assert browser.ids("nav-dev-connectors") == 0, "the forged login logged the browser in"
    assert "origin" in browser.driver.page_source.lower()  # type: ignore[attr-defined]
    browser.open(f"{browser.url}/ui/")
    assert browser.ids("token") == 1  # not logged in


def test_a_rebound_name_reaches_neither_the_page_nor_its_redirect(browser: Browser) -> None:
    port = browser.url.rsplit(":", 1)[1]
    for path in ("/ui", "/ui/login", "/healthz"):
        browser.open(f"http://{REBOUND}:{port}{path}")
        assert browser.driver.current_url.startswith(f"http://{REBOUND}:{port}{path}")  # type: ignore[attr-defined]
        assert browser.ids("token") == 0
        assert "not a name of this server" in browser.driver.page_source  # type: ignore[attr-defined]
    refused = requests.get(f"{browser.url}/ui", headers={"Host": f"{REBOUND}:{port}"}, allow_redirects=False,
                           timeout=10)  # fmt: skip
    assert refused.status_code == 421 and "location" not in refused.headers
    moved = requests.get(f"{browser.url}/ui", allow_redirects=False, timeout=10)
    assert moved.headers.get("location", "/ui/").startswith(("/", browser.url)), moved.headers

"""Issue 46 item 1: a credential planted in the Connect URL leaves the process through no exit.

The Connect URL carries a password three ways (user info, ``?password=``, ``&token=``) and points at a Connect
that is not there (a closed port) or refuses every request (401). The real ``ikkai`` runs as a user runs it:
``bundle status`` in text and ``-o json``, then ``ikkai serve`` with a reconcile loop on that URL, whose log
lines, ``/healthz`` (the degraded reason), API error bodies (the 422), page HTML (bundles and connectors views,
an action's flash message) and the page's session cookie (which carries the flash) are each read and searched
for the secret. Each exit must also show the redaction
(``<redacted>``), so an exit that printed nothing about the URL does not pass by saying nothing.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from ikkai.redaction import REDACTED
from stack.ports import free_port
from tests.cli.cli_runner import IKKAI, ROOT, run_ikkai

SECRET = "pl4nted-s3cr3t"  # noqa: S105 - the made-up credential every exit is searched for
TOKEN = "sweep-token-" + secrets.token_urlsafe(32)  # over 128 bits, as `ikkai serve` asks
SHIPPED = ROOT / "connectors" / "bundles"
BUNDLE = "payments-ingest"


def planted(port: int) -> str:
    return f"http://ikkai:{SECRET}@127.0.0.1:{port}/?password={SECRET}&token={SECRET}"


class Refusing(BaseHTTPRequestHandler):
    """A Connect worker that refuses every request (its basic-auth extension saying no)."""

    def _refuse(self) -> None:
        body = b'{"error_code": 401, "message": "User cannot access the resource."}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _refuse

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@contextmanager
def connect(kind: str) -> Iterator[int]:
    """The port of a Connect that is not there (``unreachable``) or says 401 to everything (``refusing``)."""
    if kind == "unreachable":
        yield free_port()  # nothing listens there
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def shows_no_secret(where: str, text: str) -> None:
    assert SECRET not in text, f"{where} shows the planted credential:\n{text}"
    shown = REDACTED in text or html.escape(REDACTED) in text  # HTML escapes the marker, a browser shows it
    assert shown, f"{where} says nothing of the URL, so the sweep proves nothing there:\n{text}"


@contextmanager
def serving(tmp_path: Path, connect_url: str) -> Iterator[tuple[str, Path]]:
    """``ikkai serve`` reconciling the bundle against ``connect_url``: its base URL and its stderr (the log)."""
    bundles = tmp_path / "bundles"
    shutil.copytree(SHIPPED / BUNDLE, bundles / BUNDLE)
    port = free_port()
    log = tmp_path / "serve.log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")} | {
        "IKKAI_SERVE_TOKEN": TOKEN, "IKKAI_HOME": str(tmp_path / "home"),
    }  # fmt: skip
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [str(IKKAI), "serve", "--port", str(port), "--bundles-dir", str(bundles), "--connect-url", connect_url,
             "--reconcile", f"{BUNDLE}/dev", "--interval", "3600", "--state-file", str(tmp_path / "restarts.json")],
            env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, text=True,
        )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        process.terminate()
        process.wait(30)


def degraded_health(url: str, deadline_seconds: float = 120.0) -> dict[str, str]:
    """``/healthz`` once the reconcile loop's first pass has failed (polled, with a deadline)."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        try:
            health: dict[str, str] = requests.get(f"{url}/healthz", timeout=5).json()
            if health.get("status") == "degraded":
                return health
        except requests.ConnectionError:
            pass  # not listening yet
        assert time.monotonic() < deadline, "the reconcile loop never reported its failed pass"
        time.sleep(0.2)


def page_texts(url: str) -> dict[str, str]:
    """The HTML of the views that show Connect's errors, and of an action's flash message."""
    session = requests.Session()
    session.headers["Origin"] = url
    login = session.post(f"{url}/ui/login", data={"token": TOKEN}, timeout=30)
    assert login.status_code == 200, login.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert csrf is not None
    texts = {view: session.get(f"{url}/ui/env/dev/{view}", timeout=60).text for view in ("bundles", "connectors")}
    acted = session.post(f"{url}/ui/env/dev/bundles/{BUNDLE}/restart", data={"csrf": csrf.group(1)}, timeout=120)
    texts["flash after restart"] = acted.text
    cookies = [r.headers.get("set-cookie", "") for r in (*acted.history, acted)]
    # The session lives in the server; its cookie holds a random id only, so there is nothing to redact in it,
    # but the flash once travelled inside it: it must carry no credential, decoded or not.
    carried = " ".join([*cookies, *map(cookie_text, cookies)])
    assert SECRET not in carried, f"the page's cookies carry the planted credential: {carried}"
    return texts


def cookie_text(header: str) -> str:
    """What a cookie carries, readable: each dot-separated part of its value decoded from base64 where it is."""
    value = header.partition("=")[2].partition(";")[0]
    parts = []
    for part in value.split("."):
        try:
            parts.append(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("utf-8", "replace"))
        except ValueError:
            parts.append(part)
    return " ".join(parts)


@pytest.mark.parametrize("kind", ["unreachable", "refusing"])
def test_a_credential_in_the_connect_url_leaves_through_no_exit(kind: str, tmp_path: Path) -> None:
    with connect(kind) as port:
        url = planted(port)
        bundle = str(SHIPPED / BUNDLE)
        text = run_ikkai("bundle", "status", bundle, "--connect-url", url, timeout=120)
        assert text.returncode == 1, text.stderr
        shows_no_secret("bundle status (text)", text.stdout + text.stderr)
        as_json = run_ikkai("bundle", "status", bundle, "--connect-url", url, "-o", "json", timeout=120)
        assert as_json.returncode == 1, as_json.stderr
        shows_no_secret("bundle status -o json", as_json.stdout + as_json.stderr)
        document = json.loads(as_json.stderr)
        for part in ("message", "fix"):
            assert SECRET not in document[part]
        shows_no_secret("bundle status -o json fields.url", document["fields"]["url"])

        with serving(tmp_path, url) as (served, log):
            shows_no_secret("/healthz", json.dumps(degraded_health(served)))
            for verb, method in (("status", "GET"), ("apply", "POST")):
                answer = requests.request(
                    method, f"{served}/bundles/{BUNDLE}/dev/{verb}", headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=120,
                )  # fmt: skip
                assert answer.status_code == 422, answer.text
                shows_no_secret(f"the API's {verb} 422", answer.text)
            for view, html in page_texts(served).items():
                shows_no_secret(f"the page's {view}", html)
        logged = log.read_text()
        assert f"{BUNDLE}/dev" in logged, logged  # the reconcile loop's failure is logged
        shows_no_secret("serve's log", logged)


def test_a_credential_given_on_the_command_line_leaves_through_no_line_the_cli_prints_itself() -> None:
    """The CLI's own lines (a job's ``starting:`` line, a usage error naming the value given) pass the same
    redaction as its results and errors."""
    url = planted(free_port())
    started = run_ikkai("jobs", "run", "infer", "--", "--bootstrap", url, "--help", timeout=120)
    assert started.returncode == 0, started.stderr
    assert "starting: " in started.stderr
    shows_no_secret("jobs run's starting line", started.stderr)
    refused = run_ikkai("jobs", "submit", "infer", "--master", "local[2]", "--executors", url, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "Invalid value for '--executors'" in refused.stderr and "Usage: " in refused.stderr
    shows_no_secret("a usage error", refused.stdout + refused.stderr)

"""The page the demo prints: it serves the demo's stack, its token is in a private file, and it ends with the demo."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest
import requests

from demo.live_page import LivePage
from ikkai.contract.topics import EVENTS_PAYMENTS
from ikkai.settings import Endpoints

pytestmark = pytest.mark.integration


def test_the_printed_url_shows_the_stacks_flow_after_a_login_with_the_private_token(
    stack: Endpoints, tmp_path: Path
) -> None:
    page = LivePage(tmp_path / "run", stack)
    url = page.start()
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/ui/env/dev/flow")
        assert stat.S_IMODE(page.token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(page.token_file.parent.stat().st_mode) == 0o700
        token = page.token_file.read_text().strip()
        root = url.split("/ui/")[0]

        browser = requests.Session()
        browser.headers["Origin"] = root  # as a browser sends it with a form (a POST without one is refused)
        refused = browser.post(f"{root}/ui/login", data={"token": token[::-1]}, timeout=30)
        assert refused.status_code == 401
        assert browser.post(f"{root}/ui/login", data={"token": token}, timeout=30).status_code == 200
        deadline = time.monotonic() + 60
        while 'id="flow-reading"' in (flow := browser.get(url, timeout=60)).text:  # the first sample under way
            assert time.monotonic() < deadline, "the flow's first sample was not taken within 60 s"
            time.sleep(0.5)  # a reload's pace; the condition is polled
        assert flow.status_code == 200 and "Flow in dev" in flow.text
        assert EVENTS_PAYMENTS in flow.text and 'id="flow-error"' not in flow.text  # the stack's Kafka answered
        assert token not in flow.text
        assert browser.get(f"{root}/ui/env/prod/flow", timeout=30).status_code == 403  # the token covers dev only
        assert page.answers() == {"flow": 200, "health": 200}  # what the demo's invariant after broker kills asks
    finally:
        page.stop()
    assert page.answers() == {"server": "not running"}
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=10)

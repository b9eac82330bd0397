"""Where the login lands (a local path of the page only, never another site) and who the page's applies are
recorded as: pure, then over the real server (no Connect needed)."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deploy.serve.page.login_fields import HOME, NAME_MAX, NAMELESS, applier, landing
from deploy.serve.service import ControlPlane, ServeTokens
from tests.deploy.serving import serve

TOKEN = "landing-token-" + secrets.token_urlsafe(32)  # over 128 bits, as `ikkai serve` asks
SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"


@pytest.mark.parametrize("path", ["/ui/env/dev/flow", "/ui/env/dev/connectors?page=2&name=pay"])
def test_a_local_path_of_the_page_is_where_the_login_lands(path: str) -> None:
    assert landing(path) == path


@pytest.mark.parametrize(
    "path",
    [None, "", "https://evil.example/ui/", "//evil.example/ui/", "/ui/../../etc", "/ui\\..\\x", "/other/",
     "/ui/env/dev/flow\r\nSet-Cookie: x=1", "/ui/#frag", "/ui/" + "a" * 400, "javascript:alert(1)",
     "/\\evil.example", "ui/env/dev/flow"],
)  # fmt: skip
def test_anything_else_lands_on_the_home_never_elsewhere(path: str | None) -> None:
    assert landing(path) == HOME


def test_the_applier_is_the_name_given_at_the_login_cut_and_printable() -> None:
    assert applier("ana") == "ana (page)"
    assert applier("  ana\x1b[31m \n de  souza ") == "ana [31m de souza (page)"
    assert applier("x" * 500) == "x" * NAME_MAX + " (page)"
    assert applier(None) == applier("  ") == NAMELESS


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    shutil.copytree(SHIPPED / "payments-ingest", tmp_path / "payments-ingest")
    yield from serve(ControlPlane(ServeTokens(((TOKEN, frozenset({"dev"})),)), tmp_path, "http://127.0.0.1:9"))


def test_a_view_the_login_interrupted_is_where_it_lands(url: str) -> None:
    session = requests.Session()
    session.headers["Origin"] = url  # as a browser posts the page's forms
    asked = session.get(f"{url}/ui/env/dev/flow", allow_redirects=False, timeout=30)
    assert asked.status_code == 303 and asked.headers["location"] == "/ui/login?next=%2Fui%2Fenv%2Fdev%2Fflow"
    form = session.get(f"{url}{asked.headers['location']}", timeout=30).text
    assert 'name="next" value="/ui/env/dev/flow"' in form
    logged = session.post(f"{url}/ui/login", data={"token": TOKEN, "next": "/ui/env/dev/flow"},
                          allow_redirects=False, timeout=30)  # fmt: skip
    assert logged.status_code == 303 and logged.headers["location"] == "/ui/env/dev/flow"
    elsewhere = requests.post(f"{url}/ui/login", data={"token": TOKEN, "next": "https://evil.example/"},
                              headers={"Origin": url}, allow_redirects=False, timeout=30)  # fmt: skip
    assert elsewhere.status_code == 303 and elsewhere.headers["location"] == HOME

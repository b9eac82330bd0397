"""The page's forms are small: a forged one with many fields is a 400 with a reason, never a 500."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import requests

from deploy.serve.page.access import MAX_FORM_FIELDS
from deploy.serve.service import ControlPlane
from tests.deploy.serving import serve

TOKEN = "form-test-token-" + secrets.token_urlsafe(32)  # over 128 bits, as `ikkai serve` asks


@pytest.mark.parametrize("path", ["/ui/login", "/ui/logout"])
def test_a_form_with_too_many_fields_is_a_400_that_says_so(tmp_path: Path, path: str) -> None:
    fields = {f"f{n}": "x" for n in range(MAX_FORM_FIELDS + 1)} | {"token": TOKEN}
    for url in serve(ControlPlane(TOKEN, tmp_path)):
        # with the page's own Origin, as a browser posts it (a foreign or missing one is a 403 before the form)
        answer = requests.post(f"{url}{path}", data=fields, headers={"Origin": url}, allow_redirects=False, timeout=5)
        assert answer.status_code == 400, answer.text
        assert answer.text == f"a form of more than {MAX_FORM_FIELDS} fields: the page's have one or two"
        assert "set-cookie" not in answer.headers

"""``ikkai serve`` as a user starts it, against callers who lie about who they are.

Every local user connects from 127.0.0.1, and anyone may send ``X-Forwarded-For``. The login and the API
count wrong tokens per peer (the address the connection comes from, or the one a proxy named by
``--forwarded-allow-ips`` reports), so rotating that header buys no more guesses; and a right token is
always heard, so another local user's wrong guesses cannot lock the operator out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from deploy.serve.throttle import MAX_FAILURES
from tests.deploy import test_service_slowloris

TOKEN = test_service_slowloris.TOKEN  # the token serving() starts the command with
WRONG = "8812d002b9b1a45905af0b2b6a8281cbce739d04aff4f028"


def login(url: str, token: str, forwarded_for: str | None = None) -> int:
    headers = {"Origin": url} | ({"X-Forwarded-For": forwarded_for} if forwarded_for else {})
    return requests.post(f"{url}/ui/login", data={"token": token}, headers=headers, allow_redirects=False,
                         timeout=30).status_code  # fmt: skip


def api(url: str, token: str, forwarded_for: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} | ({"X-Forwarded-For": forwarded_for} if forwarded_for else {})
    return requests.get(f"{url}/metrics", headers=headers, timeout=30).status_code


def test_rotating_x_forwarded_for_neither_escapes_the_throttle_nor_locks_the_operator_out(tmp_path: Path) -> None:
    with test_service_slowloris.serving(tmp_path) as port:
        url = f"http://127.0.0.1:{port}"
        statuses = [login(url, WRONG, f"10.0.{i}.{i}") for i in range(30)]
        assert statuses[:MAX_FAILURES] == [401] * MAX_FAILURES
        assert set(statuses[MAX_FAILURES:]) == {429}, statuses  # one peer, whatever the header says
        assert login(url, TOKEN) == 303  # the operator, from the same address, is let in all the same
        # The API counts the same way, and also lets the right token in.
        wrong = [api(url, WRONG, f"10.1.{i}.{i}") for i in range(2 * MAX_FAILURES)]
        assert 429 in wrong and set(wrong) <= {401, 429}, wrong
        assert api(url, TOKEN) == 200


def test_a_named_proxy_is_believed_and_the_throttle_keys_on_the_client_it_names(tmp_path: Path) -> None:
    with test_service_slowloris.serving(tmp_path, "--forwarded-allow-ips", "127.0.0.1") as port:
        url = f"http://127.0.0.1:{port}"
        assert [login(url, WRONG, "10.9.9.1") for _ in range(MAX_FAILURES + 1)][-1] == 429
        assert login(url, WRONG, "10.9.9.2") == 401  # another client behind the proxy: its own count


def test_behind_a_tls_proxy_the_cookie_is_secure_and_origins_are_https(tmp_path: Path) -> None:
    """The service cannot see the proxy's TLS: ``--tls-proxy`` says so, and the page's cookie is Secure."""
    with test_service_slowloris.serving(tmp_path, "--tls-proxy") as port:
        url = f"http://127.0.0.1:{port}"
        seen = f"https://127.0.0.1:{port}"  # what the browser in front of the proxy sends
        assert requests.post(f"{url}/ui/login", data={"token": TOKEN}, headers={"Origin": url}, timeout=30,
                             allow_redirects=False).status_code == 403  # fmt: skip
        login = requests.post(f"{url}/ui/login", data={"token": TOKEN}, headers={"Origin": seen}, timeout=30,
                              allow_redirects=False)  # fmt: skip
        assert login.status_code == 303 and "; secure" in login.headers["set-cookie"].lower()


def test_every_interface_needs_the_names_clients_use(tmp_path: Path) -> None:
    from deploy.serve.site import ServeSite
    from ikkai.errors import ConfigError
    from tests.cli.cli_runner import run_ikkai

    result = run_ikkai("serve", "--host", "0.0.0.0", "--insecure-http", "--port", "0", "--bundles-dir",  # noqa: S104
                       str(tmp_path), env={"IKKAI_SERVE_TOKEN": TOKEN}, timeout=60)  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "--host 0.0.0.0" in line and "--server-name" in line
    site = ServeSite.of("0.0.0.0", ("ikkai.example.com", "10.0.0.5"))  # noqa: S104
    assert site.host_ok("ikkai.example.com:8484") and site.host_ok("10.0.0.5") and not site.host_ok("127.0.0.1")
    assert ServeSite.of("::1").host_ok("[::1]:8484") and ServeSite.of("127.0.0.1").host_ok("localhost:1")
    with pytest.raises(ConfigError) as caught:
        ServeSite.of("::")
    assert "--server-name" in (caught.value.fix or "")

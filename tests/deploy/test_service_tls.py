"""``ikkai serve`` over HTTPS, and with client certificates (mutual TLS), as a real process.

The certificates are a secured stack's (``ensure_secrets``: a CA of its own, a server certificate
for 127.0.0.1, a client certificate), made in a temporary folder; no Kafka is needed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from deploy.serve.service import ServeTLS
from ikkai.errors import ConfigError
from stack.ports import free_port
from stack.stack_security import StackSecrets, ensure_secrets
from tests.cli.cli_runner import IKKAI, ROOT, run_ikkai

TOKEN = "tls-test-token-Vn5Qa9WcE2rT7yU1iO8pL3kJ6hG4fD0"  # noqa: S105 - a test's token, over 128 bits


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> StackSecrets:
    return ensure_secrets(tmp_path_factory.mktemp("pki"))


def _port() -> int:
    return int(os.environ.get("IKKAI_TEST_SERVE_PORT", "0")) or free_port()


@contextmanager
def serving(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A real ``ikkai serve`` process; yields its base URL once it said where it serves."""
    port = _port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")}
    environment |= {"IKKAI_SERVE_TOKEN": TOKEN, **(env or {})}
    process = subprocess.Popen(
        [str(IKKAI), "serve", "--port", str(port), "--bundles-dir", str(tmp_path), *options],
        env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # written once the port is bound
        assert line.startswith("serving on https://"), line + process.stderr.read()
        yield f"https://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_serve_over_https_needs_our_ca_and_still_the_token(pki: StackSecrets, tmp_path: Path) -> None:
    pem = str(pki.connect_pem)  # key and certificate in one file: both options name it
    with serving(tmp_path, "--tls-cert", pem, "--tls-key", pem) as url:
        answered = requests.get(f"{url}/metrics", headers=auth(), verify=str(pki.ca), timeout=10)
        assert answered.status_code == 200 and "ikkai_http_requests_total" in answered.text
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"{url}/metrics", headers=auth(), timeout=10)  # the system CAs do not know this one
        anonymous = requests.get(f"{url}/metrics", verify=str(pki.ca), timeout=10)
        assert anonymous.status_code == 401
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(url.replace("https://", "http://", 1) + "/healthz", timeout=10)  # no plain HTTP beside it


def test_serve_with_a_client_ca_requires_a_client_certificate(pki: StackSecrets, tmp_path: Path) -> None:
    env = {"IKKAI_SERVE_TLS_CERT": str(pki.connect_pem), "IKKAI_SERVE_TLS_KEY": str(pki.connect_pem),
           "IKKAI_SERVE_TLS_CLIENT_CA": str(pki.ca)}  # fmt: skip
    with serving(tmp_path, env=env) as url:
        answered = requests.get(
            f"{url}/metrics", headers=auth(), verify=str(pki.ca), cert=str(pki.client_pem), timeout=10
        )
        assert answered.status_code == 200
        with pytest.raises(requests.exceptions.ConnectionError):  # the handshake fails: no certificate
            requests.get(f"{url}/healthz", verify=str(pki.ca), timeout=10)
        stranger = ensure_secrets(tmp_path / "other")  # a certificate from a CA the server does not trust
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"{url}/healthz", verify=str(pki.ca), cert=str(stranger.client_pem), timeout=10)
        without_token = requests.get(f"{url}/metrics", verify=str(pki.ca), cert=str(pki.client_pem), timeout=10)
        assert without_token.status_code == 401


@pytest.mark.parametrize("case", ["missing key", "mismatched key", "not pem", "client ca alone", "cert alone"])
def test_bad_tls_files_are_one_line_naming_the_file(pki: StackSecrets, tmp_path: Path, case: str) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cert, key = str(pki.connect_pem), str(pki.connect_pem)
    options = {
        "missing key": ["--tls-cert", cert, "--tls-key", str(tmp_path / "nope.pem")],
        "mismatched key": ["--tls-cert", cert, "--tls-key", str(pki.client_pem)],
        "not pem": ["--tls-cert", str(garbage), "--tls-key", key],
        "client ca alone": ["--tls-client-ca", str(pki.ca)],
        "cert alone": ["--tls-cert", cert],
    }[case]
    result = run_ikkai("serve", "--port", "0", "--bundles-dir", str(tmp_path), *options,
                       env={"IKKAI_SERVE_TOKEN": TOKEN}, timeout=60)  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    expected = {
        "missing key": ("nope.pem", "cannot be read"),
        "mismatched key": ("client.pem", "is not the key of the certificate"),
        "not pem": ("garbage.pem", "PEM"),
        "client ca alone": ("--tls-client-ca", "needs --tls-cert and --tls-key"),
        "cert alone": ("--tls-key", "missing while --tls-cert is given"),
    }[case]
    assert all(part in line for part in expected), line


def test_no_tls_options_mean_plain_http() -> None:
    assert ServeTLS.of(None, None, None) is None
    with pytest.raises(ConfigError, match="--tls-cert"):
        ServeTLS.of(None, Path("key.pem"), None)

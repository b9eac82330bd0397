"""The tokens of ``ikkai serve``: file permissions as ssh checks them, scopes per environment, plain HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deploy.serve.service import ControlPlane, ServeTLS, check_plain_http
from deploy.serve.tokens import MIN_BITS, ServeTokens, estimated_bits, read_token, read_tokens
from ikkai.errors import ConfigError
from tests.cli.cli_runner import run_ikkai
from tests.deploy.serving import serve

DEV = "ecf8481c54e2aa4cc810a9c185858bfc0674e5bd66140553"
PROD = "eee67f80b2140b5eec3a9f585f5a129a8c22a70fb7f7ff60"
ALL = "a7Kq2ZpX9vR4mT1wLc8NbY3sHd6Gj0Ue5Fo_-iQ"


def token_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_token_file_group_or_others_may_read_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = token_file(tmp_path, ALL + "\n", mode)
    with pytest.raises(ConfigError) as caught:
        read_token({}, path)
    assert f"permissions {mode:04o} are too open" in str(caught.value) and caught.value.fix == f"chmod 600 {path}"
    result = run_ikkai("serve", "--port", "0", "--token-file", str(path), timeout=60)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert str(path) in line and "too open" in line and f"chmod 600 {path}" in line
    assert ALL not in result.stderr


def test_scoped_tokens_cover_their_environments_only(tmp_path: Path) -> None:
    text = f"# environments: token\ndev, staging: {DEV}\n\nprod: {PROD}\n*: {ALL}\n"
    tokens = read_tokens({}, token_file(tmp_path, text))
    assert tokens.environments(DEV) == {"dev", "staging"} and tokens.environments(PROD) == {"prod"}
    assert tokens.environments("nope-" + "n" * 16) is None
    every = tokens.environments(ALL)
    assert every is not None and ServeTokens.covers(every, "prod") and ServeTokens.covers(every, "anything")
    assert read_tokens({}, token_file(tmp_path, ALL + "\n")) == ServeTokens.single(ALL)  # one token: every env
    assert read_tokens({"IKKAI_SERVE_TOKEN": ALL}, None) == ServeTokens.single(ALL)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"dev: {DEV}\nprod {PROD}\n", "line 2: token: not 'environments: token'"),
        (f"dev: {DEV}\nProd: {PROD}\n", "line 2: token: not 'environments: token'"),
        (f"dev: {DEV}\nprod: short\n", "line 2: token: about 12 bits by the variety of its characters, under 128"),
        (f"dev: {DEV}\nprod: {DEV}\n", "line 2: token: used on an earlier line too"),
    ],
)
def test_a_bad_token_line_is_named_and_its_token_never_quoted(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        read_tokens({}, token_file(tmp_path, text))
    assert problem in str(caught.value)
    assert DEV not in str(caught.value) and PROD not in str(caught.value)


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    tokens = read_tokens({}, token_file(tmp_path, f"dev, staging: {DEV}\nprod: {PROD}\n"))
    yield from serve(ControlPlane(tokens, tmp_path / "bundles", connect_url="http://127.0.0.1:9"))


def test_a_dev_token_is_refused_on_prod_routes_and_takes_metrics(url: str) -> None:
    def plan(env: str, token: str) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"}
        return requests.get(f"{url}/bundles/payments-ingest/{env}/plan", headers=headers, timeout=5)

    refused = plan("prod", DEV)
    assert refused.status_code == 403 and refused.json() == {"error": "this token is not for environment prod"}
    assert plan("prod", PROD).status_code == 422  # past the token: there is no such bundle here
    assert plan("staging", DEV).status_code == 422
    assert plan("dev", PROD).status_code == 403
    assert plan("dev", ALL).status_code == 401  # not a token of this file
    assert requests.get(f"{url}/metrics", headers={"Authorization": f"Bearer {DEV}"}, timeout=5).status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "ikkai.example.com"])  # noqa: S104 - refused hosts
def test_plain_http_on_a_non_loopback_address_needs_insecure_http(host: str) -> None:
    with pytest.raises(ConfigError, match="--insecure-http"):
        check_plain_http(host, None, insecure_http=False)
    check_plain_http(host, None, insecure_http=True)
    check_plain_http(host, ServeTLS(Path("cert.pem"), Path("key.pem")), insecure_http=False)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_plain_http_on_loopback_needs_no_flag(host: str) -> None:
    check_plain_http(host, None, insecure_http=False)


def test_serve_on_every_interface_without_tls_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    result = run_ikkai("serve", "--host", "0.0.0.0", "--port", "0", "--bundles-dir", str(tmp_path),  # noqa: S104
                       env={"IKKAI_SERVE_TOKEN": ALL}, timeout=60)  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "--host 0.0.0.0" in line and "--insecure-http" in line and "in clear" in line


@pytest.mark.parametrize("weak", ["a" * 64, "ab" * 32, "every-env-token-" + "a" * 16, "0123456789abcdef"])
def test_a_token_of_under_128_bits_is_refused_when_read(tmp_path: Path, weak: str) -> None:
    assert estimated_bits(weak) < MIN_BITS
    with pytest.raises(ConfigError, match="bits") as caught:
        read_tokens({"IKKAI_SERVE_TOKEN": weak}, None)
    assert caught.value.fix is not None and "openssl rand -hex 24" in caught.value.fix
    assert weak not in str(caught.value)
    with pytest.raises(ConfigError, match=r"line 2.*bits"):
        read_tokens({}, token_file(tmp_path, f"prod: {PROD}\ndev: {weak}\n"))
    result = run_ikkai("serve", "--port", "0", "--bundles-dir", str(tmp_path), env={"IKKAI_SERVE_TOKEN": weak},
                       timeout=60)  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "$IKKAI_SERVE_TOKEN" in line and "128 bits" in line and weak not in line


def test_random_tokens_of_the_documented_sizes_pass() -> None:
    import secrets

    for _ in range(200):
        for token in (secrets.token_hex(24), secrets.token_urlsafe(32)):
            assert estimated_bits(token) >= MIN_BITS, token

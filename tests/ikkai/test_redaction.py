"""Credentials inside URLs: the one rule (ikkai.redaction), and the registry errors that print a URL."""

from __future__ import annotations

import pytest

from ikkai.contract.codec import shipped_catalog
from ikkai.contract.registry import RegistryCodec, RegistryError, frame
from ikkai.contract.wire_format import RegistrySettings, check_url
from ikkai.errors import ConfigError
from ikkai.redaction import REDACTED, carries_url_credentials, redact_urls
from stack.ports import free_port

R = REDACTED


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("jdbc:postgresql://db/x?user=a&password=secret", f"jdbc:postgresql://db/x?user=a&password={R}"),
        ("http://user:pass@host/", f"http://{R}@host/"),
        ("https://tok3n@host/v1", f"https://{R}@host/v1"),
        ("jdbc:sqlserver://h;user=a;password=p@ss;db=x", f"jdbc:sqlserver://h;user=a;password={R};db=x"),
        ("mongodb://u:p@ss@h1,h2/db?authSource=admin", f"mongodb://{R}@h1,h2/db?authSource=admin"),
        ("https://s3/o?X-Amz-Credential=AK&X-Amz-Signature=ab&X-Amz-Date=1",
         f"https://s3/o?X-Amz-Credential={R}&X-Amz-Signature={R}&X-Amz-Date=1"),
        ("https://h/?api_key=1&apikey=2&access_token=3&key=4&sig=5&PWD=6&Token=7&client.secret=8&sslpassword=9",
         f"https://h/?api_key={R}&apikey={R}&access_token={R}&key={R}&sig={R}&PWD={R}&Token={R}&client.secret={R}"
         f"&sslpassword={R}"),
        ("Invalid value http://u:p@h/x?token=t for configuration url: bad; see https://docs/x",
         f"Invalid value http://{R}@h/x?token={R} for configuration url: bad; see https://docs/x"),
    ],
)  # fmt: skip
def test_user_info_and_password_like_parameters_are_redacted(text: str, shown: str) -> None:
    assert redact_urls(text) == shown
    assert carries_url_credentials(text)
    assert redact_urls(shown) == shown and not carries_url_credentials(shown)  # redacting twice changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "https://payments.prod.ikkai.internal/v1",
        "http://127.0.0.1:8099",
        "jdbc:postgresql://db/x?password=${file:/etc/ikkai/db.properties:password}",  # a reference, not a secret
        "http://${env:REGISTRY_USER}:${env:REGISTRY_PASSWORD}@registry:8081",
        "https://h/?keyword=fraud&sslkey=/etc/ssl/key.pem&page=2",  # names that only contain a secret word
        "http://h/p@x?email=a@b.example",  # an @ after the path is not user info
        "not a URL: ?password=x",  # no scheme://, no URL
        "",
    ],
)
def test_what_is_not_a_credential_is_left_as_it_was(text: str) -> None:
    assert redact_urls(text) == text
    assert not carries_url_credentials(text)


def test_a_registry_error_never_prints_the_credentials_of_its_url() -> None:
    url = f"http://svc:s3cret@127.0.0.1:{free_port()}/apis/ccompat/v7?token=t0ken"
    codec = RegistryCodec(shipped_catalog(), {"url": url, "max.retries": 0})
    with pytest.raises(RegistryError) as caught:
        codec.decode("payment_event", frame(7, b""), version=1)  # asks the registry for schema 7
    printed = f"{caught.value} {caught.value.url} {caught.value.problem} {codec!r} {codec.url}"
    assert "s3cret" not in printed and "t0ken" not in printed and "svc" not in printed
    assert f"http://{REDACTED}@127.0.0.1:" in str(caught.value)
    quoted = RegistryError(url, "look up", f"ConnectError: GET {url}/schemas/ids/7 failed", fix="check the url")
    assert "s3cret" not in f"{quoted} {quoted.url} {quoted.problem}"  # a transport error may quote the URL


def test_registry_settings_and_a_bad_registry_url_never_print_credentials() -> None:
    settings = RegistrySettings("https://registry:8081/?api_key=s3cret")
    assert "s3cret" not in repr(settings) and f"api_key={REDACTED}" in repr(settings)
    for url in ("ftp://svc:s3cret@registry:8081", "svc:s3cret@registry:8081"):
        with pytest.raises(ConfigError) as caught:
            check_url(url)
        assert "s3cret" not in str(caught.value) and "is not an http(s) URL" in str(caught.value)


def test_a_url_ends_at_a_quote_or_a_tag_and_html_gets_the_escaped_marker() -> None:
    from html import escape

    text = '<td>http://u:p@h/x?password=s</td> "http://h/?token=t" <a href="http://u:p@h/">'
    shown = redact_urls(text, escape(REDACTED))
    marker = escape(REDACTED)
    assert (
        shown
        == f'<td>http://{marker}@h/x?password={marker}</td> "http://h/?token={marker}" <a href="http://{marker}@h/">'
    )
    assert redact_urls(shown, marker) == shown  # redacting twice changes nothing, with either marker


def test_data_is_redacted_string_by_string_numbers_kept() -> None:
    from ikkai.redaction import redact_data

    data = {"url": "http://u:p@h/?token=t", "fields": [{"n": 1, "ok": True, "none": None}, ("http://u:p@h",)]}
    assert redact_data(data) == {
        "url": f"http://{R}@h/?token={R}", "fields": [{"n": 1, "ok": True, "none": None}, [f"http://{R}@h"]],
    }  # fmt: skip

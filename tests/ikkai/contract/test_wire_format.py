"""The setting that picks an environment's wire format, without a registry (nothing here opens a socket)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

import ikkai.contract.codec as codec_module
from ikkai.contract.codec import CATALOG_VAR, SchemaCatalog, SchemaError, SingleObjectCodec, default_codec, schemas_dir
from ikkai.contract.registry import RegistryCodec
from ikkai.contract.wire_format import CONFIG_VAR, URL_VAR, environment_codec, registry_settings
from ikkai.errors import ConfigError

URL = "http://127.0.0.1:1/apis/ccompat/v7"
RECEIPT = {
    "decision_id": "d" * 64, "key": "pay-1", "target": "payments-api", "outcome": "DELIVERED", "status_code": 200,
    "attempts": 1, "first_attempt_at": 1, "last_attempt_at": 2, "response_digest": None, "reason": None,
}  # fmt: skip


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "registry.properties"
    path.write_text(text)
    return path


def test_unset_is_the_single_object_codec_with_unchanged_bytes() -> None:
    codec = environment_codec({})
    assert isinstance(codec, SingleObjectCodec)
    assert codec.encode("outbox_receipt", RECEIPT) == default_codec().encode("outbox_receipt", RECEIPT)
    assert registry_settings({URL_VAR: "  "}) is None


def test_a_url_picks_the_registry_codec_once_per_process() -> None:
    codec = environment_codec({URL_VAR: URL + "/"})
    assert isinstance(codec, RegistryCodec) and codec.url == URL and codec.auto_register
    assert environment_codec({URL_VAR: URL + "/"}) is codec  # read once: every writer of the process shares it


@pytest.mark.parametrize("url", ["registry:8081", "ftp://registry:8081", "http://", "http://a:1,nothing"])
def test_a_bad_url_is_refused_naming_the_variable(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        registry_settings({URL_VAR: url})
    assert caught.value.key == URL_VAR and "http(s) URL" in str(caught.value)


def test_credentials_in_the_url_are_refused_and_never_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        registry_settings({URL_VAR: "https://svc:s3cret@registry:8081"})
    assert "s3cret" not in str(caught.value) and "basic.auth.user.info" in str(caught.value)


def test_the_config_file_gives_credentials_tls_numbers_and_auto_register(tmp_path: Path) -> None:
    path = config_file(tmp_path, "# a comment\nbasic.auth.user.info=svc:s3cret\nssl.ca.location=/etc/ca.pem\n"
                       "timeout=12.5\nmax.retries=5\nauto.register.schemas=false\n")  # fmt: skip
    settings = registry_settings({URL_VAR: URL, CONFIG_VAR: str(path)})
    assert settings is not None
    assert settings.client_conf() == {"url": URL, "basic.auth.user.info": "svc:s3cret",
                                      "ssl.ca.location": "/etc/ca.pem", "timeout": 12.5, "max.retries": 5}  # fmt: skip
    assert not settings.auto_register and str(path) in settings.source
    assert "s3cret" not in repr(settings) and "****" in repr(settings)
    codec = environment_codec({URL_VAR: URL, CONFIG_VAR: str(path)})
    assert isinstance(codec, RegistryCodec) and not codec.auto_register and "s3cret" not in repr(codec)


def test_an_unknown_key_names_the_file_and_the_keys_it_takes(tmp_path: Path) -> None:
    path = config_file(tmp_path, "schema.registry.url=http://x\nbasic.auth.user.info=svc:pw\n")
    with pytest.raises(ConfigError) as caught:
        registry_settings({URL_VAR: URL, CONFIG_VAR: str(path)})
    assert caught.value.source == "schema registry config" and caught.value.key == str(path)
    assert "schema.registry.url" in str(caught.value) and "ssl.ca.location" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("url=http://x\n", "names url"),
        ("timeout=soon\n", "not a number"),
        ("auto.register.schemas=maybe\n", "auto.register.schemas=maybe"),
        ("basic.auth.user.info=only-a-user\n", "<user>:<password>"),
        ("ssl.key.location=/k.pem\n", "ssl.certificate.location"),
        ("bearer.auth.credentials.source=CUSTOM\n", "bearer.auth.credentials.source=CUSTOM"),
    ],
)
def test_a_wrong_entry_is_refused_naming_the_file(tmp_path: Path, text: str, problem: str) -> None:
    path = config_file(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        registry_settings({URL_VAR: URL, CONFIG_VAR: str(path)})
    assert caught.value.key == str(path) and problem in str(caught.value)


def test_a_missing_file_or_a_file_without_a_url_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.properties"
    with pytest.raises(ConfigError) as caught:
        registry_settings({URL_VAR: URL, CONFIG_VAR: str(missing)})
    assert caught.value.key == str(missing) and "no such file" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        registry_settings({CONFIG_VAR: str(config_file(tmp_path, "timeout=5\n"))})
    assert caught.value.key == CONFIG_VAR and URL_VAR in str(caught.value)


def test_codecs_over_the_shipped_catalog_ship_to_executors_as_names() -> None:
    # The jobs pick the codec on the driver and ship it with every task: it must stay small.
    single, registry = environment_codec({}), environment_codec({URL_VAR: URL})
    assert len(pickle.dumps(single)) < 200 and len(pickle.dumps(registry)) < 1_000
    copy = pickle.loads(pickle.dumps(registry))  # noqa: S301 - our own bytes
    assert isinstance(copy, RegistryCodec) and copy.catalog is default_codec().catalog and copy.url == URL
    assert pickle.loads(pickle.dumps(single)).catalog is default_codec().catalog  # noqa: S301 - our own bytes


def test_a_codec_named_by_its_catalog_is_refused_where_another_catalog_is_shipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A driver and an executor with different catalogs: the name alone would silently switch schemas."""
    single, registry = pickle.dumps(environment_codec({})), pickle.dumps(environment_codec({URL_VAR: URL}))
    other = tmp_path / "catalog"
    shutil.copytree(schemas_dir(), other)
    newest = max((other / "payment_event").glob("v*.avsc"), key=lambda p: int(p.stem[1:]))
    schema = json.loads(newest.read_text())
    schema["fields"].append({"name": "added_here", "type": ["null", "string"], "default": None})
    (other / "payment_event" / f"v{int(newest.stem[1:]) + 1}.avsc").write_text(json.dumps(schema))
    other_catalog = SchemaCatalog.from_dir(other)
    assert other_catalog.digest() != default_codec().catalog.digest()
    monkeypatch.setattr(codec_module, "_shipped_catalog", lambda: other_catalog)  # this process plays such an executor
    for data in (single, registry):
        with pytest.raises(SchemaError) as caught:
            pickle.loads(data)  # noqa: S301 - our own bytes
        assert "not the one the codec was made with" in str(caught.value) and CATALOG_VAR in str(caught.value)

"""The secured stack's mutual-TLS and OAUTHBEARER listeners, unstarted: what the broker and clients are told."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12

from ikkai.contract.kafka_security import java_client_settings, librdkafka_settings, load_security
from stack.stack_config import Ports, broker_properties
from stack.stack_security import (
    OAUTH_AUDIENCE,
    OAUTH_ISSUER,
    OAUTH_KEY_ID,
    broker_jvm_options,
    broker_security,
    ensure_secrets,
    mtls_client_settings,
    oauth_client_settings,
    with_extra_listeners,
)


def test_the_extra_listeners_are_added_beside_sasl_ssl_with_their_own_rules(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    base = broker_properties(Ports(9092, 9093, 8083), tmp_path / "data")
    for key in ("listeners", "advertised.listeners"):
        base[key] = base[key].replace("PLAINTEXT://", "SASL_SSL://")
    properties = with_extra_listeners(base | broker_security(stack), stack, {"mtls": 9094, "oauth": 9095}, "127.0.0.1")
    assert properties["listeners"].split(",") == [
        "SASL_SSL://127.0.0.1:9092", "CONTROLLER://127.0.0.1:9093", "MTLS://127.0.0.1:9094", "OAUTH://127.0.0.1:9095",
    ]  # fmt: skip
    assert properties["advertised.listeners"].endswith(",MTLS://127.0.0.1:9094,OAUTH://127.0.0.1:9095")
    assert "MTLS:SSL" in properties["listener.security.protocol.map"].split(",")
    assert "OAUTH:SASL_SSL" in properties["listener.security.protocol.map"].split(",")
    assert properties["listener.name.mtls.ssl.client.auth"] == "required"
    assert properties["ssl.client.auth"] == "requested"  # the SASL_SSL listener keeps its own rule
    assert properties["listener.name.oauth.sasl.enabled.mechanisms"] == "OAUTHBEARER"
    prefix = "listener.name.oauth.oauthbearer.sasl.oauthbearer"
    assert properties[f"{prefix}.jwks.endpoint.url"] == stack.jwks.as_uri()
    assert properties[f"{prefix}.expected.audience"] == OAUTH_AUDIENCE
    assert properties[f"{prefix}.expected.issuer"] == OAUTH_ISSUER
    assert f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={stack.jwks.as_uri()}" in broker_jvm_options(stack)


def test_the_client_certificate_comes_as_pem_and_pkcs12_and_both_translate_for_librdkafka(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    key, cert, chain = pkcs12.load_key_and_certificates(
        stack.client_keystore.read_bytes(), stack.client_password.encode()
    )
    assert key is not None and cert is not None and len(chain) == 1  # the CA travels with it
    pem = librdkafka_settings(load_security(_written(tmp_path / "pem.properties", mtls_client_settings(stack))))
    assert pem["ssl.certificate.location"] == pem["ssl.key.location"] == str(stack.client_pem)
    settings = mtls_client_settings(stack, keystore="PKCS12")
    p12 = librdkafka_settings(load_security(_written(tmp_path / "p12.properties", settings)))
    assert p12["ssl.keystore.location"] == str(stack.client_keystore)
    assert p12["ssl.keystore.password"] == stack.client_password
    assert stack.mtls_properties.read_text().count("ssl.keystore.location=") == 1


def test_oauth_client_settings_go_to_librdkafka_as_oidc_and_to_java_as_written(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    settings = oauth_client_settings(stack, "https://idp.example/token", "svc-fraud", "s3cret")
    security = load_security(_written(tmp_path / "oauth.properties", settings))
    librdkafka = librdkafka_settings(security)
    assert librdkafka["sasl.oauthbearer.method"] == "oidc"
    assert librdkafka["sasl.oauthbearer.client.id"] == "svc-fraud"
    assert librdkafka["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/token"
    assert not any(k.startswith("sasl.login") for k in librdkafka)  # a Java class name means nothing to librdkafka
    java = java_client_settings(security)
    assert java["sasl.login.callback.handler.class"].endswith("OAuthBearerLoginCallbackHandler")
    assert "s3cret" not in repr(security)


def test_the_jwks_holds_the_public_half_of_the_issuer_key(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    [jwk] = json.loads(stack.jwks.read_text())["keys"]
    key = serialization.load_pem_private_key(stack.oauth_signing_key.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    modulus = int.from_bytes(base64.urlsafe_b64decode(jwk["n"] + "=" * (-len(jwk["n"]) % 4)), "big")
    assert (jwk["kid"], jwk["alg"], modulus) == (OAUTH_KEY_ID, "RS256", key.public_key().public_numbers().n)
    assert "d" not in jwk


def test_a_home_made_before_the_extra_listeners_gets_their_files_and_keeps_its_ca(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    ca = stack.ca.read_bytes()
    for path in (stack.client_keystore, stack.jwks, stack.oauth_signing_key, stack.mtls_properties):
        path.unlink()
    again = ensure_secrets(tmp_path)
    assert again.ca.read_bytes() == ca and again.client_password == stack.client_password
    assert again.client_keystore.is_file() and again.jwks.is_file() and again.mtls_properties.is_file()


def _written(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path

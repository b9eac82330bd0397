"""A secured stack's certificates and settings, without starting it: who signs what, what each side is told."""

from __future__ import annotations

import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding

from ikkai.contract.kafka_security import librdkafka_settings, load_security
from stack.local_stack import LocalStack
from stack.shape import StackOptions
from stack.stack_config import Ports
from stack.stack_security import (
    CLIENT_USER,
    broker_security,
    client_settings,
    connect_security,
    ensure_secrets,
    scram_credentials,
)


def _certificates(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def test_every_certificate_is_signed_by_the_stacks_own_ca_for_loopback(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    [ca] = _certificates(stack.ca)
    for pem in (stack.broker_pem, stack.connect_pem, stack.client_pem):
        text = pem.read_text()
        assert "BEGIN PRIVATE KEY" in text  # PKCS#8, unencrypted: what Kafka's PEM keystore reads
        [cert] = _certificates(pem)
        ca.public_key().verify(  # type: ignore[union-attr]
            cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm
        )
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "localhost" in names.get_values_for_type(x509.DNSName)
        assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_secrets_are_private_and_kept_across_restarts(tmp_path: Path) -> None:
    first = ensure_secrets(tmp_path)
    assert stat.S_IMODE(first.dir.stat().st_mode) == 0o700
    for path in first.dir.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    ca = first.ca.read_bytes()
    again = ensure_secrets(tmp_path)
    assert again == first and again.ca.read_bytes() == ca
    assert first.client_password not in repr(first)


def test_the_client_file_is_one_every_client_reads(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    security = load_security(stack.client_properties)
    assert librdkafka_settings(security) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": CLIENT_USER,
        "sasl.password": stack.client_password, "ssl.ca.location": str(stack.ca),
    }  # fmt: skip


def test_broker_and_worker_settings_agree_with_the_client(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    broker = broker_security(stack)
    assert broker["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    assert "SCRAM-SHA-512" in broker["sasl.enabled.mechanisms"].split(",")
    assert f'user_{CLIENT_USER}="{stack.client_password}"' in broker["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert scram_credentials(stack) == [
        "--add-scram", f"SCRAM-SHA-512=[name={CLIENT_USER},password={stack.client_password}]"
    ]  # fmt: skip
    worker = connect_security(stack, 8083, "127.0.0.1")
    for role in ("", "producer.", "consumer.", "admin."):
        for key, value in client_settings(stack).items():
            assert worker[role + key] == value
    assert worker["listeners"] == "https://127.0.0.1:8083"


def test_a_secured_home_renders_sasl_ssl_listeners_and_an_https_connect(tmp_path: Path) -> None:
    local = LocalStack(tmp_path / "home", tmp_path / "jars", StackOptions(secure=True))
    ports = Ports(broker=19092, controller=19093, connect=18083)
    properties = local._broker_properties(ports, "broker", 1)
    assert properties["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert properties["advertised.listeners"] == "SASL_SSL://127.0.0.1:19092"
    endpoints = local._endpoints(ports)
    assert endpoints.connect_url == "https://127.0.0.1:18083"
    assert endpoints.kafka_config.endswith("secure/client.properties")
    plain = LocalStack(tmp_path / "plain", tmp_path / "jars")
    assert plain._broker_properties(ports, "broker", 1)["listeners"].startswith("PLAINTEXT://")
    assert plain._endpoints(ports).kafka_config == ""

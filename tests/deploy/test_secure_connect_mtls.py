"""The secured stack's Connect REST server checks a client certificate, for real (issue #18).

The worker listens on HTTPS with ``listeners.https.ssl.client.auth=requested`` and the stack's CA as
its truststore: a certificate the CA signed is accepted, one from another CA is refused in the TLS
handshake, and no certificate at all still works (basic auth decides who may call). The stack is
started once for the module in its own home (``IKKAI_TEST_SECURE_HOME`` names a running one to reuse).
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deploy.connect_rest import ConnectAccessDenied, ConnectClient
from ikkai.settings import ConnectAuth, Endpoints, endpoints_connect_auth
from stack.stack_security import StackSecrets, connect_security, ensure_secrets

CLUSTER = "env secure-test"


def test_an_older_home_gets_the_rest_truststore_with_its_own_ca(tmp_path: Path) -> None:
    stack = ensure_secrets(tmp_path)
    ca_before = stack.ca.read_bytes()
    stack.connect_truststore.unlink()  # a home made before the REST server checked client certificates
    again = ensure_secrets(tmp_path)
    assert again.ca.read_bytes() == ca_before
    store = pkcs12.load_pkcs12(again.connect_truststore.read_bytes(), again.rest_password.encode())
    assert [c.certificate for c in store.additional_certs] == [x509.load_pem_x509_certificate(ca_before)]
    worker = connect_security(again, 8083, "127.0.0.1")
    assert worker["listeners.https.ssl.client.auth"] == "requested"
    assert worker["listeners.https.ssl.truststore.location"] == str(again.connect_truststore)


def _foreign_client_pem(path: Path) -> Path:
    """A client key and certificate (one PEM file) signed by a CA key the stack has never seen."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "some other CA")])
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ikkai")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(key_pem + cert.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.mark.integration
def test_the_credentials_file_names_the_stacks_client_certificate(
    secure_stack: tuple[Endpoints, StackSecrets],
) -> None:
    endpoints, secrets = secure_stack
    auth = endpoints_connect_auth(endpoints)
    assert auth.client_cert == str(secrets.client_pem)
    pem = secrets.client_pem.read_text()
    assert "PRIVATE KEY" in pem and "BEGIN CERTIFICATE" in pem  # requests reads key and certificate from one file
    assert secrets.connect_truststore.is_file()


@pytest.mark.integration
def test_basic_auth_with_the_stacks_client_certificate_lists_connectors(
    secure_stack: tuple[Endpoints, StackSecrets],
) -> None:
    endpoints, secrets = secure_stack
    auth = replace(endpoints_connect_auth(endpoints), client_cert=str(secrets.client_pem))
    client = ConnectClient(endpoints.connect_url, cluster=CLUSTER, auth=auth)
    assert isinstance(client.connectors(), list)


@pytest.mark.integration
def test_basic_auth_without_a_client_certificate_still_works(secure_stack: tuple[Endpoints, StackSecrets]) -> None:
    endpoints, _ = secure_stack
    auth = replace(endpoints_connect_auth(endpoints), client_cert=None)
    assert auth.requests_options().get("cert") is None
    client = ConnectClient(endpoints.connect_url, cluster=CLUSTER, auth=auth)
    assert isinstance(client.connectors(), list)


@pytest.mark.integration
def test_a_client_certificate_from_another_ca_is_refused_in_one_line(
    secure_stack: tuple[Endpoints, StackSecrets], tmp_path: Path
) -> None:
    endpoints, secrets = secure_stack
    foreign = _foreign_client_pem(tmp_path / "foreign-client.pem")
    auth = replace(endpoints_connect_auth(endpoints), client_cert=str(foreign))
    client = ConnectClient(endpoints.connect_url, cluster=CLUSTER, auth=auth, retry_deadline=5)
    with pytest.raises(ConnectAccessDenied) as refused:
        client.connectors()
    message = str(refused.value)
    assert "\n" not in message
    assert endpoints.connect_url in message and CLUSTER in message
    assert "the worker refused the client certificate" in message and '"client_cert"' in message
    assert "name the CA that signed the worker's certificate" not in message  # the worker's certificate was fine
    assert secrets.rest_password not in message
    assert client.calls == [("GET", "/connectors")]  # refused in the handshake: not retried


@pytest.mark.integration
def test_a_client_certificate_needs_basic_auth_too(secure_stack: tuple[Endpoints, StackSecrets]) -> None:
    endpoints, secrets = secure_stack
    auth = ConnectAuth(ca=str(secrets.ca), client_cert=str(secrets.client_pem))
    client = ConnectClient(endpoints.connect_url, cluster=CLUSTER, auth=auth)
    with pytest.raises(ConnectAccessDenied, match="401"):
        client.connectors()

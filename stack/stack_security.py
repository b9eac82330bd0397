"""A secured embedded stack's certificates and credentials (``ikkai stack up --secure``).

Written once under ``<home>/secure/`` (mode 0700, files 0600) and kept across restarts:

- ``ca.pem`` — a CA made for this stack only; ``broker.pem`` / ``connect.pem`` — the broker's and
  the Connect REST server's key and certificate (for 127.0.0.1 and localhost), signed by it;
  ``client.pem`` / ``client.p12`` — a client certificate (PEM, and PKCS#12 with the client password),
  for the mutual-TLS listener and the Connect REST server; ``ca.p12`` — the CA as a PKCS#12 truststore
  (REST password) for the Connect REST server, which checks a client certificate when one is given;
  ``client-mtls.properties`` — a client of that listener, in Kafka's names.
- ``oauth-signing.pem`` / ``jwks.json`` — an RS256 signing key and its public half as a JWKS file: the
  OAUTHBEARER listener accepts JWTs it signed (audience ``ikkai-kafka``, issuer ``ikkai-embedded-stack``).
  An identity provider that issues such tokens stands in front of it (tests/stack/identity_provider.py
  is a small one).
- ``client.properties`` — what a client needs, in Kafka's names: SASL_SSL, SCRAM-SHA-512 as user
  ``ikkai``, the CA as a PEM truststore. ``IKKAI_KAFKA_CONFIG`` names it for ikkai's clients.
- ``connect-users.properties`` / ``connect-jaas.conf`` — the Connect REST user for Apache Kafka's
  basic-auth REST extension; ``connect-rest.json`` its user name and password, the CA and the client
  certificate for ikkai's REST client.

Passwords come from ``secrets`` and never leave these files (and ``<home>/config/``'s, also 0600 in a
0700 folder); none goes on a command line: ``storage-format.args`` holds the SCRAM user for
``kafka-storage format`` while it runs. Pure functions render the broker's
and the worker's settings from them (``stack_config`` keeps the plaintext ones).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SECURE_DIR = "secure"
CLIENT_USER = "ikkai"
BROKER_USER = "broker"  # inter-broker SASL/PLAIN
CONNECT_REST_USER = "ikkai"
CLIENT_MECHANISM = "SCRAM-SHA-512"
REST_EXTENSION = "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
VALID_DAYS = 825
MTLS_LISTENER = "MTLS"  # SSL, ssl.client.auth=required: the client certificate is the identity
OAUTH_LISTENER = "OAUTH"  # SASL_SSL with OAUTHBEARER: a JWT signed by the stack's issuer key
OAUTH_AUDIENCE = "ikkai-kafka"
OAUTH_ISSUER = "ikkai-embedded-stack"  # the "iss" a token must carry
OAUTH_KEY_ID = "ikkai-stack-1"
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OAUTH_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"  # Kafka 4.x: none unless named
ALLOWED_FILES_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.files"


@dataclass(frozen=True)
class StackSecrets:
    """Where a secured stack's files are and the passwords in them."""

    dir: Path
    client_password: str
    broker_password: str
    rest_password: str

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def broker_pem(self) -> Path:
        return self.dir / "broker.pem"

    @property
    def connect_pem(self) -> Path:
        return self.dir / "connect.pem"

    @property
    def connect_keystore(self) -> Path:
        """The REST server's key and certificate as PKCS#12: Jetty reads Java keystore types, not PEM."""
        return self.dir / "connect.p12"

    @property
    def connect_truststore(self) -> Path:
        """The CA as PKCS#12 for the REST server's client-certificate check (Jetty reads no PEM truststore)."""
        return self.dir / "ca.p12"

    @property
    def client_pem(self) -> Path:
        return self.dir / "client.pem"

    @property
    def client_keystore(self) -> Path:
        """``client.pem`` as PKCS#12, protected by the client password (for Java keystore readers)."""
        return self.dir / "client.p12"

    @property
    def client_properties(self) -> Path:
        return self.dir / "client.properties"

    @property
    def mtls_properties(self) -> Path:
        return self.dir / "client-mtls.properties"

    @property
    def oauth_signing_key(self) -> Path:
        return self.dir / "oauth-signing.pem"

    @property
    def jwks(self) -> Path:
        return self.dir / "jwks.json"

    @property
    def jaas(self) -> Path:
        return self.dir / "connect-jaas.conf"

    @property
    def rest_users(self) -> Path:
        return self.dir / "connect-users.properties"

    @property
    def rest_credentials(self) -> Path:
        return self.dir / "connect-rest.json"

    @property
    def storage_arguments(self) -> Path:
        """``kafka-storage format``'s argument file (``@file``, one argument a line), there only while it runs."""
        return self.dir / "storage-format.args"

    def __repr__(self) -> str:
        return f"StackSecrets({self.dir})"


def _jaas(module: str, **options: str) -> str:
    quoted = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"{module} required {quoted};"


def client_settings(stack: StackSecrets, *, password: str | None = None) -> dict[str, str]:
    """A client of the stack, in Kafka's names (``password`` other than the stack's: for a wrong-credentials test)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": CLIENT_MECHANISM,
        "sasl.jaas.config": _jaas(SCRAM_MODULE, username=CLIENT_USER, password=password or stack.client_password),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(stack.ca),
    }


def mtls_client_settings(stack: StackSecrets, *, keystore: str = "PEM") -> dict[str, str]:
    """A client of the mutual-TLS listener: the CA, and the client certificate as PEM or PKCS#12."""
    settings = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(stack.ca)}
    if keystore == "PEM":
        return settings | {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(stack.client_pem)}
    return settings | {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(stack.client_keystore),
                       "ssl.keystore.password": stack.client_password}  # fmt: skip


def oauth_client_settings(
    stack: StackSecrets, token_endpoint: str, client_id: str, client_secret: str
) -> dict[str, str]:
    """A client of the OAUTHBEARER listener that fetches its JWT from ``token_endpoint`` (client credentials)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": _jaas(OAUTH_LOGIN_MODULE, clientId=client_id, clientSecret=client_secret),
        "sasl.login.callback.handler.class": OAUTH_LOGIN_HANDLER,
        "sasl.oauthbearer.token.endpoint.url": token_endpoint,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(stack.ca),
    }


def with_extra_listeners(
    properties: Mapping[str, str], stack: StackSecrets, ports: Mapping[str, int], host: str
) -> dict[str, str]:
    """A secured broker's settings (``broker_security``'s) with the MTLS and OAUTH listeners added.

    ``ports`` maps ``mtls`` and ``oauth`` to their ports. MTLS speaks SSL and requires a client
    certificate signed by the stack's CA; OAUTH speaks SASL_SSL with OAUTHBEARER only and checks a
    JWT's signature against the stack's JWKS file, its expiry, audience and issuer.
    """
    extra = {MTLS_LISTENER: ("SSL", ports["mtls"]), OAUTH_LISTENER: ("SASL_SSL", ports["oauth"])}
    addresses = ",".join(f"{name}://{host}:{port}" for name, (_, port) in extra.items())
    protocols = ",".join(f"{name}:{protocol}" for name, (protocol, _) in extra.items())
    oauth = f"listener.name.{OAUTH_LISTENER.lower()}"
    return {
        **properties,
        "listeners": f"{properties['listeners']},{addresses}",
        "advertised.listeners": f"{properties['advertised.listeners']},{addresses}",
        "listener.security.protocol.map": f"{properties['listener.security.protocol.map']},{protocols}",
        f"listener.name.{MTLS_LISTENER.lower()}.ssl.client.auth": "required",
        f"{oauth}.sasl.enabled.mechanisms": "OAUTHBEARER",
        f"{oauth}.oauthbearer.sasl.jaas.config": f"{OAUTH_LOGIN_MODULE} required;",
        f"{oauth}.oauthbearer.sasl.server.callback.handler.class": OAUTH_VALIDATOR,
        f"{oauth}.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": stack.jwks.as_uri(),
        f"{oauth}.oauthbearer.sasl.oauthbearer.expected.audience": OAUTH_AUDIENCE,
        f"{oauth}.oauthbearer.sasl.oauthbearer.expected.issuer": OAUTH_ISSUER,
    }


def broker_jvm_options(stack: StackSecrets) -> list[str]:
    """Kafka 4.x reads no OAuth URL or file it was not told it may: the JWKS file is allowed by name."""
    return [f"-D{ALLOWED_URLS_PROPERTY}={stack.jwks.as_uri()}", f"-D{ALLOWED_FILES_PROPERTY}={stack.jwks}"]


def broker_security(stack: StackSecrets) -> dict[str, str]:
    """What ``stack_config.broker_properties`` changes for a secured node: SASL_SSL for clients and brokers.

    The controller listener stays PLAINTEXT on loopback. Brokers talk to each other with SASL/PLAIN
    (users in the listener's JAAS); clients use SCRAM-SHA-512 (users created when storage is formatted).
    """
    users = {f"user_{BROKER_USER}": stack.broker_password, f"user_{CLIENT_USER}": stack.client_password}
    prefix = "listener.name.sasl_ssl"
    return {
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": f"PLAIN,{CLIENT_MECHANISM}",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        f"{prefix}.plain.sasl.jaas.config": _jaas(
            PLAIN_MODULE, username=BROKER_USER, password=stack.broker_password, **users
        ),
        f"{prefix}.{CLIENT_MECHANISM.lower()}.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(stack.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(stack.ca),
        "ssl.client.auth": "requested",  # SASL authenticates; a client certificate is checked when given
    }


def scram_credentials(stack: StackSecrets) -> list[str]:
    """``kafka-storage format --add-scram`` arguments: the client user exists before the broker first starts.

    They hold the client password, so they go into an argument file (``storage_arguments``), never on
    the command line, where every local user reads them (``ps``, ``/proc/<pid>/cmdline``).
    """
    return ["--add-scram", f"{CLIENT_MECHANISM}=[name={CLIENT_USER},password={stack.client_password}]"]


def connect_security(stack: StackSecrets, rest_port: int, host: str) -> dict[str, str]:
    """What ``stack_config.connect_properties`` changes for a secured worker: its clients and its REST server."""
    clients = client_settings(stack)
    settings = {
        **clients,
        **{f"{role}.{k}": v for role in ("producer", "consumer", "admin") for k, v in clients.items()},
        "listeners": f"https://{host}:{rest_port}",
        "rest.advertised.listener": "https",
        "listeners.https.ssl.keystore.type": "PKCS12",
        "listeners.https.ssl.keystore.location": str(stack.connect_keystore),
        "listeners.https.ssl.keystore.password": stack.rest_password,
        "listeners.https.ssl.key.password": stack.rest_password,
        "listeners.https.ssl.truststore.type": "PKCS12",
        "listeners.https.ssl.truststore.location": str(stack.connect_truststore),
        "listeners.https.ssl.truststore.password": stack.rest_password,
        # a client certificate is checked against the CA when one is given; basic auth decides who may call
        "listeners.https.ssl.client.auth": "requested",
        "rest.extension.classes": REST_EXTENSION,
    }
    return settings


def connect_jvm_options(stack: StackSecrets) -> list[str]:
    return [f"-Djava.security.auth.login.config={stack.jaas}"]


def ensure_secrets(home: Path) -> StackSecrets:
    """The stack's secrets, made on first use and read back afterwards."""
    directory = home / SECURE_DIR
    passwords = directory / "passwords.json"
    if passwords.is_file():
        saved = json.loads(passwords.read_text())
        stack = StackSecrets(directory, saved["client"], saved["broker"], saved["rest"])
        files = (stack.ca, stack.broker_pem, stack.connect_pem, stack.connect_keystore, stack.client_pem)
        if all(path.is_file() for path in files):
            client_files = (stack.client_properties, stack.rest_users, stack.jaas, stack.rest_credentials,
                            stack.mtls_properties, stack.client_keystore, stack.jwks,
                            stack.connect_truststore)  # fmt: skip
            if not all(path.is_file() for path in client_files):  # read on every health poll: write only what is gone
                _write_client_files(stack)
            return stack
    home.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new home is the user's only; an existing one is kept
    private_dir(directory)
    stack = StackSecrets(directory, secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(24))
    write_private(passwords, json.dumps({"client": stack.client_password, "broker": stack.broker_password,
                                         "rest": stack.rest_password}))  # fmt: skip
    ca_key, ca_cert = _certificate_authority()
    write_private(stack.ca, ca_cert.public_bytes(serialization.Encoding.PEM).decode())
    for path, name, usage in (
        (stack.broker_pem, "ikkai-broker", ExtendedKeyUsageOID.SERVER_AUTH),
        (stack.connect_pem, "ikkai-connect", ExtendedKeyUsageOID.SERVER_AUTH),
        (stack.client_pem, CLIENT_USER, ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key, cert = _signed(ca_key, ca_cert, name, usage)
        write_private(path, _pem_key(key) + cert.public_bytes(serialization.Encoding.PEM).decode())
        if path == stack.connect_pem:
            encryption = serialization.BestAvailableEncryption(stack.rest_password.encode())
            p12 = pkcs12.serialize_key_and_certificates(b"connect", key, cert, [ca_cert], encryption)
            write_private(stack.connect_keystore, p12)
    _write_client_files(stack)
    return stack


def _write_client_files(stack: StackSecrets) -> None:
    for path, settings in ((stack.client_properties, client_settings(stack)),
                           (stack.mtls_properties, mtls_client_settings(stack))):  # fmt: skip
        lines = [f"{k}={v}" for k, v in settings.items()]
        write_private(path, "# written by ikkai stack up --secure\n" + "\n".join(lines) + "\n")
    if not stack.client_keystore.is_file():  # from client.pem: a home made before it existed gets one too
        pem = stack.client_pem.read_bytes()
        key = serialization.load_pem_private_key(pem, password=None)
        cert, *chain = x509.load_pem_x509_certificates(pem)
        ca = x509.load_pem_x509_certificate(stack.ca.read_bytes())
        encryption = serialization.BestAvailableEncryption(stack.client_password.encode())
        p12 = pkcs12.serialize_key_and_certificates(b"client", key, cert, [*chain, ca], encryption)  # type: ignore[arg-type]
        write_private(stack.client_keystore, p12)
    if not stack.connect_truststore.is_file():  # the stack's own CA: a home made before it existed keeps its CA
        ca = x509.load_pem_x509_certificate(stack.ca.read_bytes())
        encryption = serialization.BestAvailableEncryption(stack.rest_password.encode())
        p12 = pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"ikkai-ca")], encryption)
        write_private(stack.connect_truststore, p12)
    if not stack.jwks.is_file():
        _write_oauth_issuer(stack)
    write_private(stack.rest_users, f"{CONNECT_REST_USER}: {stack.rest_password}\n")
    write_private(stack.jaas, (
        "KafkaConnect {\n  org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule required\n"
        f'  file="{stack.rest_users}";\n}};\n'
    ))  # fmt: skip
    write_private(stack.rest_credentials, json.dumps({
        "username": CONNECT_REST_USER, "password": stack.rest_password, "ca": str(stack.ca),
        "client_cert": str(stack.client_pem),  # key and certificate in one PEM file, as requests reads it
    }))  # fmt: skip


def _write_oauth_issuer(stack: StackSecrets) -> None:
    """The signing key of the tokens the OAUTHBEARER listener accepts, and its public half as a JWKS."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.public_key().public_numbers()

    def b64(value: int) -> str:
        raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    jwk = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": OAUTH_KEY_ID, "n": b64(numbers.n), "e": b64(numbers.e)}
    write_private(stack.oauth_signing_key, _pem_key(key))
    write_private(stack.jwks, json.dumps({"keys": [jwk]}))


def private_dir(path: Path) -> None:
    """``path`` as a folder only its user may enter (0700), made so or narrowed before anything is written in it.

    The folders above it are made with the default mode (a stack's home is made 0700 where it is made).
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)  # an existing folder (a home made by an older ikkai) is narrowed too


def write_private(path: Path, data: str | bytes) -> None:
    """Write ``path`` as a file only its user may read (0600) from its first byte: a new file, renamed over.

    The content goes into a fresh ``.<name>.partial`` created 0600 (a leftover one, or a link planted
    in its place, is removed first), so no reader ever sees the content under a wider mode, and an
    older file of mode 0644 is replaced, not rewritten in place.
    """
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
    partial.replace(path)


def _pem_key(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)


def _certificate_authority() -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ikkai embedded stack CA")])
    start, end = _validity()
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return key, cert


def _signed(
    ca_key: rsa.RSAPrivateKey, ca_cert: x509.Certificate, common_name: str, usage: x509.ObjectIdentifier
) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    start, end = _validity()
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    return key, cert

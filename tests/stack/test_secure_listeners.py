"""The secured stack's other two listeners, for real: mutual TLS, and OAUTHBEARER with a JWT from an identity provider.

Clients read one client-properties file in Kafka's own keys (``IKKAI_KAFKA_CONFIG``), as for
SCRAM: ``security.protocol=SSL`` with a client certificate (PEM or PKCS#12), or SASL_SSL with
``OAuthBearerLoginModule required clientId=… clientSecret=…;`` and the token endpoint, which ikkai's
Python clients turn into librdkafka's OIDC client-credentials login. The identity provider is a
small fake of the outside world (tests/stack/identity_provider.py) signing with the stack's issuer
key. ``IKKAI_TEST_SECURE_HOME`` names a running secured home to reuse, ``IKKAI_TEST_IDP_PORT`` the
identity provider's port.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import payment_records, simulate
from ikkai.contract import kafka
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.kafka_security import CONFIG_VAR, client_security
from ikkai.errors import KafkaAccessError
from ikkai.settings import jars_dir
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique
from stack.local_stack import LocalStack
from stack.shape import StackOptions
from stack.stack_security import (
    OAUTH_AUDIENCE,
    OAUTH_ISSUER,
    OAUTH_KEY_ID,
    StackSecrets,
    ensure_secrets,
    mtls_client_settings,
    oauth_client_settings,
)
from tests.stack.identity_provider import IdentityProvider, running

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

CLIENT_ID, CLIENT_SECRET = "svc-fraud", "client-secret-" + "z" * 16


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StackSecrets, dict[str, str]]]:
    """The stack's secrets and its extra listeners (``mtls``, ``oauth`` → host:port)."""
    reuse = os.environ.get("IKKAI_TEST_SECURE_HOME")
    home = Path(reuse) if reuse else tmp_path_factory.mktemp("secure") / "home"
    local = LocalStack(home, jars_dir(), StackOptions(secure=True), heap="512m", progress=sys.stderr)
    local.up()
    secrets = local.stack_secrets()
    assert secrets is not None
    try:
        yield secrets, local.secure_listeners()
    finally:
        if not reuse:
            local.down(purge=True)


@pytest.fixture(scope="module")
def identity_provider(secured: tuple[StackSecrets, dict[str, str]]) -> Iterator[tuple[IdentityProvider, str]]:
    secrets, _ = secured
    idp = IdentityProvider(secrets.oauth_signing_key, secrets.jwks, OAUTH_KEY_ID, OAUTH_AUDIENCE, OAUTH_ISSUER,
                           {CLIENT_ID: CLIENT_SECRET})  # fmt: skip
    with running(idp, int(os.environ.get("IKKAI_TEST_IDP_PORT", "0"))) as url:
        yield idp, url


def _use(monkeypatch: pytest.MonkeyPatch, path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    monkeypatch.setenv(CONFIG_VAR, str(path))


def _transaction_round_trip(bootstrap: str) -> None:
    """A transactional write, an aborted one, and what a read_committed consumer sees: only the committed."""
    topic = f"listener.{uuid.uuid4().hex[:8]}"
    assert kafka.ensure_topics(KafkaContext.from_environment(bootstrap), [topic], 1) == [topic]
    producer = Producer(KafkaContext.from_environment(bootstrap).producer_config(**{"transactional.id": f"t-{topic}"}))
    producer.init_transactions(30)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        producer.begin_transaction()
        producer.produce(topic, key=b"pay-1", value=value)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    consumer = Consumer(
        KafkaContext.from_environment(bootstrap).consumer_config(f"g-{topic}", **{"auto.offset.reset": "earliest"})
    )
    assert KafkaContext.from_environment(bootstrap).consumer_config("g")["isolation.level"] == "read_committed"
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.append(message.value() or b"")
            if seen and message is None:
                break
    finally:
        consumer.close()
    assert seen == [b"committed"]


@pytest.mark.parametrize("keystore", ["PEM", "PKCS12"])
def test_a_transaction_goes_through_the_mutual_tls_listener_with_a_client_certificate(
    secured: tuple[StackSecrets, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keystore: str
) -> None:
    secrets, listeners = secured
    _use(monkeypatch, tmp_path / "mtls.properties", mtls_client_settings(secrets, keystore=keystore))
    assert KafkaContext.from_environment(listeners["mtls"]).producer_config()["security.protocol"] == "SSL"
    kafka.check_access(KafkaContext.from_environment(listeners["mtls"]))
    _transaction_round_trip(listeners["mtls"])
    assert secrets.client_password not in repr(client_security())


def test_the_stack_writes_the_mutual_tls_client_file(
    secured: tuple[StackSecrets, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets, listeners = secured
    monkeypatch.setenv(CONFIG_VAR, str(secrets.mtls_properties))
    kafka.check_access(KafkaContext.from_environment(listeners["mtls"]))


@pytest.mark.parametrize("case", ["no client certificate", "a certificate of another CA"])
def test_the_mutual_tls_listener_refuses_a_client_without_our_certificate_in_one_line(
    secured: tuple[StackSecrets, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    secrets, listeners = secured
    settings = mtls_client_settings(secrets)
    if case == "no client certificate":
        del settings["ssl.keystore.type"], settings["ssl.keystore.location"]
    else:
        settings["ssl.keystore.location"] = str(ensure_secrets(tmp_path / "other").client_pem)
    _use(monkeypatch, tmp_path / "mtls.properties", settings)
    with pytest.raises(KafkaAccessError) as caught:
        kafka.check_access(KafkaContext.from_environment(listeners["mtls"]), timeout=10)
    line = str(caught.value)
    assert "\n" not in line and listeners["mtls"] in line and caught.value.fix
    assert caught.value.reason in ("protocol", "tls")
    if case == "no client certificate":
        assert "client certificate" in line


def test_a_transaction_goes_through_oauthbearer_with_a_token_from_the_identity_provider(
    secured: tuple[StackSecrets, dict[str, str]],
    identity_provider: tuple[IdentityProvider, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secrets, listeners = secured
    idp, url = identity_provider
    settings = oauth_client_settings(secrets, f"{url}/token", CLIENT_ID, CLIENT_SECRET)
    _use(monkeypatch, tmp_path / "oauth.properties", settings)
    librdkafka = KafkaContext.from_environment(listeners["oauth"]).producer_config()
    assert librdkafka["sasl.oauthbearer.method"] == "oidc" and "sasl.login.callback.handler.class" not in librdkafka
    before = len(idp.issued)
    kafka.check_access(KafkaContext.from_environment(listeners["oauth"]))
    _transaction_round_trip(listeners["oauth"])
    assert idp.issued[before:] and set(idp.issued[before:]) == {CLIENT_ID}  # the broker saw the IdP's tokens
    assert CLIENT_SECRET not in repr(client_security()) and "svc-fraud" in client_security().describe()


@pytest.mark.parametrize("case", ["a token the stack did not sign", "a wrong client secret"])
def test_oauthbearer_refuses_in_one_line(
    secured: tuple[StackSecrets, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    secrets, listeners = secured
    issuer = ensure_secrets(tmp_path / "other") if case == "a token the stack did not sign" else secrets
    idp = IdentityProvider(issuer.oauth_signing_key, issuer.jwks, OAUTH_KEY_ID, OAUTH_AUDIENCE, OAUTH_ISSUER,
                           {CLIENT_ID: CLIENT_SECRET})  # fmt: skip
    secret = CLIENT_SECRET if case == "a token the stack did not sign" else "not-the-secret"
    with running(idp) as url:
        _use(monkeypatch, tmp_path / "oauth.properties", oauth_client_settings(secrets, f"{url}/token", CLIENT_ID,
                                                                               secret))  # fmt: skip
        with pytest.raises(KafkaAccessError) as caught:
            kafka.check_access(KafkaContext.from_environment(listeners["oauth"]), timeout=10)
    line = str(caught.value)
    assert caught.value.reason == "authentication" and "\n" not in line and listeners["oauth"] in line
    assert "clientSecret" in (caught.value.fix or "") and CLIENT_ID in line
    assert CLIENT_SECRET not in line and "not-the-secret" not in line
    assert set(idp.issued) == ({CLIENT_ID} if case == "a token the stack did not sign" else set())


def test_the_infer_job_reads_and_writes_through_oauthbearer(
    secured: tuple[StackSecrets, dict[str, str]],
    identity_provider: tuple[IdentityProvider, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark's Kafka source (a Java client: OAuthBearerLoginCallbackHandler, the keys as written) and the
    job's transactional sink (librdkafka's OIDC login) both fetch their tokens from the identity provider."""
    secrets, listeners = secured
    idp, url = identity_provider
    _use(monkeypatch, tmp_path / "oauth.properties",
         oauth_client_settings(secrets, f"{url}/token", CLIENT_ID, CLIENT_SECRET))  # fmt: skip
    cluster = KafkaContext.from_environment(listeners["oauth"])  # with the client file just set
    payments = payment_records(simulate(5, payments=20).payments)
    name = unique("oauth")
    topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.input, topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, 1)
    produce_payments(cluster, topics.input, payments, 1)
    before = len(idp.issued)
    job = InferProcess(cluster, topics, tmp_path / "checkpoint", name)
    assert job.wait() == 0, job.tail()
    assert len(idp.issued) - before >= 2  # the job's Java and Python clients logged in on their own
    codec = default_codec()
    values = [value or b"" for _, value in flat(by_partition(cluster, topics.decisions))]
    decisions = [codec.decode("fraud_decision", value) for value in values]
    assert sorted(d["event_id"] for d in decisions) == sorted(str(p["event_id"]) for p in payments)

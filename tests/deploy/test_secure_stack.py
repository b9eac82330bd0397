"""The secured embedded stack, for real: SASL_SSL (SCRAM-SHA-512) on the broker, HTTPS with basic auth on Connect.

Every client reads one client-properties file (``IKKAI_KAFKA_CONFIG``); wrong credentials, a wrong
CA or a plaintext client get one clear error naming the cluster and what to check. The stack is
started once for the module in its own home (``IKKAI_TEST_SECURE_HOME`` names a running one to reuse).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, Producer

from demo.infer_process import InferProcess, InferTopics
from demo.payments_simulation import generate_profiles, payment_records, simulate
from demo.raw_payments import mixed_stream, produce_lines
from ikkai.contract import kafka
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.kafka_security import CONFIG_VAR, client_security
from ikkai.errors import KafkaAccessError
from ikkai.settings import Endpoints, endpoints_connect_auth
from outbox_sink import OutboxEmitter, OutboxRequest
from spark_jobs.enrich.master_data import publish_profiles
from stack.kit.topic_io import by_partition, create_topic, flat, produce_payments, unique
from stack.stack_security import CLIENT_USER, PLAIN_MODULE, StackSecrets, client_settings, ensure_secrets
from tests.cli.cli_runner import run_ikkai
from tests.spark_jobs.enrich_process import EnrichProcess, EnrichTopics

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


def _properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def _round_trip(bootstrap: str, topic: str, value: bytes) -> None:
    """One committed transaction on a new topic, read back by a read_committed consumer."""
    assert kafka.ensure_topics(KafkaContext.from_environment(bootstrap), [topic], 1) == [topic]
    producer = Producer(KafkaContext.from_environment(bootstrap).producer_config(**{"transactional.id": f"t-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=value)
    producer.commit_transaction(30)
    consumer = Consumer(
        KafkaContext.from_environment(bootstrap).consumer_config(f"g-{topic}", **{"auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    try:
        message = None
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None and message.value() == value
    finally:
        consumer.close()


def test_a_transaction_goes_through_sasl_ssl_with_the_one_client_file(
    secure_stack: tuple[Endpoints, StackSecrets], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoints, secrets = secure_stack
    monkeypatch.setenv(CONFIG_VAR, endpoints.kafka_config)
    bootstrap = endpoints.bootstrap_servers
    kafka.check_access(KafkaContext.from_environment(bootstrap))
    _round_trip(bootstrap, f"secure.{uuid.uuid4().hex[:8]}", b"over TLS, as ikkai")
    assert secrets.client_password not in repr(client_security())  # the settings never show it in a repr
    assert KafkaContext.from_environment(bootstrap).producer_config()["security.protocol"] == "SASL_SSL"


def test_a_plain_login_from_the_client_file_is_accepted_too(
    secure_stack: tuple[Endpoints, StackSecrets], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SASL/PLAIN over TLS, as a cluster that keeps PLAIN users has it: the same file, another login module."""
    endpoints, secrets = secure_stack
    settings = client_settings(secrets) | {
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required username="{CLIENT_USER}" password="{secrets.client_password}";',
    }
    monkeypatch.setenv(CONFIG_VAR, str(_properties(tmp_path / "plain.properties", settings)))
    bootstrap = endpoints.bootstrap_servers
    assert KafkaContext.from_environment(bootstrap).producer_config()["sasl.mechanism"] == "PLAIN"
    kafka.check_access(KafkaContext.from_environment(bootstrap), timeout=10)
    _round_trip(bootstrap, f"secure.plain.{uuid.uuid4().hex[:8]}", b"over PLAIN")
    # The wrong password through PLAIN is refused in one line, like SCRAM's.
    settings["sasl.jaas.config"] = f'{PLAIN_MODULE} required username="{CLIENT_USER}" password="not-it";'
    monkeypatch.setenv(CONFIG_VAR, str(_properties(tmp_path / "plain-wrong.properties", settings)))
    with pytest.raises(KafkaAccessError) as caught:
        kafka.check_access(KafkaContext.from_environment(bootstrap), timeout=10)
    assert caught.value.reason == "authentication" and "\n" not in str(caught.value)


@pytest.mark.parametrize("case", ["wrong password", "wrong CA", "plaintext"])
def test_a_client_the_cluster_refuses_gets_one_line_naming_the_cluster_and_what_to_check(
    secure_stack: tuple[Endpoints, StackSecrets], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    endpoints, secrets = secure_stack
    settings = client_settings(secrets, password="not-the-password" if case == "wrong password" else None)
    if case == "wrong CA":
        settings["ssl.truststore.location"] = str(ensure_secrets(tmp_path / "other").ca)
    if case == "plaintext":
        settings = {"security.protocol": "PLAINTEXT"}
    monkeypatch.setenv(CONFIG_VAR, str(_properties(tmp_path / "client.properties", settings)))
    with pytest.raises(KafkaAccessError) as caught:
        kafka.check_access(KafkaContext.from_environment(endpoints.bootstrap_servers), timeout=10)  # the file set above
    error = caught.value
    assert error.reason == {"wrong password": "authentication", "wrong CA": "tls", "plaintext": "protocol"}[case]
    assert endpoints.bootstrap_servers in str(error) and error.fix
    assert "\n" not in str(error)
    assert secrets.client_password not in str(error) and "not-the-password" not in str(error)


def test_connect_answers_https_with_basic_auth_only(secure_stack: tuple[Endpoints, StackSecrets]) -> None:
    endpoints, secrets = secure_stack
    assert endpoints.connect_url.startswith("https://")
    auth = endpoints_connect_auth(endpoints)
    answered = requests.get(f"{endpoints.connect_url}/connectors", timeout=10, **auth.requests_options())
    assert answered.status_code == 200 and isinstance(answered.json(), list)
    anonymous = requests.get(f"{endpoints.connect_url}/connectors", timeout=10, verify=str(secrets.ca))
    assert anonymous.status_code == 401
    wrong = requests.get(f"{endpoints.connect_url}/connectors", timeout=10, verify=str(secrets.ca), auth=("ikkai", "x"))
    assert wrong.status_code == 401
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{endpoints.connect_url}/connectors", timeout=10)  # the system CAs do not know this one


def _secure_env(endpoints: Endpoints, **changes: str) -> dict[str, str]:
    return {
        "IKKAI_BOOTSTRAP_SERVERS": endpoints.bootstrap_servers, "IKKAI_CONNECT_URL": endpoints.connect_url,
        "IKKAI_KAFKA_CONFIG": endpoints.kafka_config, "IKKAI_CONNECT_CREDENTIALS": endpoints.connect_credentials,
        **changes,
    }  # fmt: skip


def test_a_bundle_applied_through_https_and_basic_auth_lands_its_lines_through_sasl_ssl(
    secure_stack: tuple[Endpoints, StackSecrets], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ikkai bundle apply` authenticates to Connect; the connector's producer authenticates to Kafka."""
    endpoints, _ = secure_stack
    monkeypatch.setenv(CONFIG_VAR, endpoints.kafka_config)
    name = uuid.uuid4().hex[:8]
    topics = {"payments": f"ingest.sec-{name}", "refunds": f"ingest.sec-refunds-{name}"}
    kafka.ensure_topics(KafkaContext.recorded(endpoints), list(topics.values()), 1)
    files = {source: tmp_path / f"{source}.jsonl" for source in topics}
    for path in files.values():
        path.write_text("")
    sets = ["--set=partitions=1"]
    for source in topics:
        sets += [f"--set=sources.{source}.topic={topics[source]}", f"--set=sources.{source}.file={files[source]}"]
    applied = run_ikkai("bundle", "apply", "payments-ingest", "--env", "dev", *sets, env=_secure_env(endpoints))
    assert applied.returncode == 0, applied.stderr
    files["payments"].write_text('{"payment_id": "pay-secure-1", "amount": "1.00"}\n')
    consumer = Consumer(
        KafkaContext.recorded(endpoints).consumer_config(f"g-{name}", **{"auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topics["payments"]])
    try:
        message = None
        for _ in range(90):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None, "the connector's line never arrived"
        assert message.key() == b"pay-secure-1"
    finally:
        consumer.close()
    denied = run_ikkai(
        "bundle", "status", "payments-ingest", "--env", "dev", *sets,
        env=_secure_env(endpoints, IKKAI_CONNECT_CREDENTIALS=str(_credentials(tmp_path, endpoints, "wrong"))),
    )  # fmt: skip
    assert denied.returncode == 1
    [line] = denied.stderr.strip().splitlines()
    assert "401" in line and endpoints.connect_url in line and "credentials" in line


def _credentials(tmp_path: Path, endpoints: Endpoints, password: str) -> Path:
    document = json.loads(Path(endpoints.connect_credentials).read_text())
    path = tmp_path / "connect-credentials.json"
    path.write_text(json.dumps({**document, "password": password}))
    return path


def test_the_infer_job_and_the_emitter_work_through_sasl_ssl(
    secure_stack: tuple[Endpoints, StackSecrets], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's Spark Kafka source, its transactional sink, its marker reads and a service's emitter, all secured."""
    endpoints, _ = secure_stack
    monkeypatch.setenv(CONFIG_VAR, endpoints.kafka_config)
    cluster = KafkaContext.recorded(endpoints)  # the job process is given its client file
    payments = payment_records(simulate(7, payments=40).payments)
    name = unique("sec")
    topics = InferTopics(f"events.{name}", f"decisions.{name}", f"outbox.{name}", f"dlq.{name}")
    for topic in (topics.input, topics.decisions, topics.outbox, topics.dlq):
        create_topic(cluster, topic, 1)
    produce_payments(cluster, topics.input, payments, 1)
    job = InferProcess(cluster, topics, tmp_path / "checkpoint", name)
    assert job.wait() == 0, job.tail()
    codec = default_codec()
    decisions = [codec.decode("fraud_decision", value) for _, value in flat(by_partition(cluster, topics.decisions))]
    assert sorted(d["event_id"] for d in decisions) == sorted(str(p["event_id"]) for p in payments)
    request = OutboxRequest(decisions[0]["decision_id"], decisions[0]["payment_id"], "payments-api", "/x", b"{}", 1)
    with OutboxEmitter(cluster, topic=topics.outbox) as emitter:
        emitter.emit(request)
    emitted = [codec.decode("outbox_request", v) for _, v in flat(by_partition(cluster, topics.outbox))]
    assert any(r["decision_id"] == request.decision_id and r["path"] == "/x" for r in emitted)


def test_the_enrich_job_works_through_sasl_ssl(
    secure_stack: tuple[Endpoints, StackSecrets], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raw lines, master data read as of the event time (Spark's batch Kafka reader), events and dead letters."""
    endpoints, _ = secure_stack
    monkeypatch.setenv(CONFIG_VAR, endpoints.kafka_config)
    cluster = KafkaContext.recorded(endpoints)
    stream = mixed_stream(11, payments=40, partitions=1)
    name = unique("sec")
    topics = EnrichTopics(f"ingest.{name}", f"events.{name}", f"dlq.{name}", f"md.m.{name}", f"md.c.{name}")
    merchants, customers = generate_profiles(stream.world, 11)
    publish_profiles(cluster, merchants, customers, merchants_topic=topics.merchants,
                     customers_topic=topics.customers, transactional_id=unique("test.masterdata"))  # fmt: skip
    for topic in (topics.input, topics.events, topics.dlq):
        create_topic(cluster, topic, 1)
    produce_lines(cluster, topics.input, stream.lines)
    job = EnrichProcess(cluster, topics, tmp_path / "checkpoint", name)
    assert job.wait() == 0, job.tail()
    codec = default_codec()
    events = [codec.decode("payment_event", value) for _, value in flat(by_partition(cluster, topics.events))]
    letters = flat(by_partition(cluster, topics.dlq))
    assert sorted(e["event_id"] for e in events) == sorted(stream.expected_event_ids())
    assert len(events) + len(letters) == len(stream.lines)

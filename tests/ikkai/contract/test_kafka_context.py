"""One Kafka client context: where the cluster is and as whom, resolved once and carried to every client.

Every client's settings come from a ``KafkaContext``; none reads the environment by itself, and
no module sets ``IKKAI_KAFKA_CONFIG`` for others to find. Pickled into Spark tasks, the context's
security settings travel as their file's path, not as the secrets.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from ikkai.contract.kafka import KafkaContext, resolve_cluster
from ikkai.contract.kafka_security import CONFIG_VAR, NO_SECURITY, load_security
from ikkai.errors import ConfigError
from ikkai.settings import BOOTSTRAP_VAR, HOME_VAR, STACK_STATE

PASSWORD = "pa55-w0rd-not-in-any-pickle"  # noqa: S105 - a test secret, looked for where it must not be
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
CLIENT = f"""security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config={SCRAM} required username="ikkai" password="{PASSWORD}";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/ikkai/ca.pem
"""


def _client_file(folder: Path, name: str = "client.properties") -> Path:
    path = folder / name
    path.write_text(CLIENT)
    return path


def _recorded_stack(home: Path, kafka_config: str = "") -> None:
    endpoints = {"bootstrap_servers": "127.0.0.1:21001", "connect_url": "http://127.0.0.1:21002",
                 "kafka_config": kafka_config}  # fmt: skip
    (home / STACK_STATE).write_text(json.dumps({"endpoints": endpoints}))


def test_every_client_config_carries_the_same_cluster_and_security(tmp_path: Path) -> None:
    cluster = KafkaContext.at("k1:9093,k2:9093", _client_file(tmp_path))
    configs = [cluster.client_config(), cluster.consumer_config("g"), cluster.producer_config()]
    for config in configs:
        assert config["bootstrap.servers"] == "k1:9093,k2:9093"
        assert config["security.protocol"] == "SASL_SSL" and config["sasl.password"] == PASSWORD
    spark = cluster.spark_options()
    assert spark["kafka.bootstrap.servers"] == "k1:9093,k2:9093" and spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert cluster.broker("k2:9093").client_config()["sasl.password"] == PASSWORD  # one broker, same client
    assert PASSWORD not in repr(cluster) and PASSWORD not in cluster.describe()


def test_a_context_pickles_its_security_as_the_files_path_never_the_secret(tmp_path: Path) -> None:
    """Mutation: without ``SecurityConfig.__reduce__`` the password is in the pickle (a Spark task's bytes)."""
    cluster = KafkaContext.at("k:9093", _client_file(tmp_path))
    pickled = pickle.dumps(cluster)
    assert PASSWORD.encode() not in pickled and b"client.properties" in pickled  # the path, in parts
    assert pickle.loads(pickled) == cluster  # noqa: S301 - our own bytes; read again where they arrive
    in_memory = KafkaContext("k:9092", NO_SECURITY)
    assert pickle.loads(pickle.dumps(in_memory)) == in_memory  # noqa: S301 - our own bytes


def test_a_bare_address_takes_the_environments_client_file_only_through_the_one_door(tmp_path: Path) -> None:
    env = {CONFIG_VAR: str(_client_file(tmp_path))}
    assert KafkaContext.from_environment("k:9093", env).security == load_security(_client_file(tmp_path))
    assert KafkaContext.from_environment("k:9092", {}).security == NO_SECURITY
    given = KafkaContext("k:9092")
    assert KafkaContext.of(given, "OutboxEmitter") is given  # a context is taken as it is, the environment not read
    with pytest.raises(ConfigError, match="not a KafkaContext") as refused:
        KafkaContext.of("k:9092", "OutboxEmitter")  # type: ignore[arg-type]
    assert refused.value.source == "OutboxEmitter" and "KafkaContext.from_environment" in str(refused.value.fix)
    with pytest.raises(ConfigError, match="bootstrap servers"):
        KafkaContext(" ")


def test_the_environment_door_reads_the_client_file_now_and_only_when_called(tmp_path: Path) -> None:
    env = {CONFIG_VAR: str(_client_file(tmp_path))}
    assert KafkaContext.from_environment("k:9093", env).security == load_security(_client_file(tmp_path))
    assert KafkaContext.from_environment("k:9092", {}) == KafkaContext("k:9092", NO_SECURITY)
    resolved = KafkaContext.from_environment("k:9093", env)
    env.clear()  # passed down, a context keeps what its entry resolved
    assert resolved.security == load_security(_client_file(tmp_path))


def test_the_cluster_is_resolved_from_flag_environment_or_the_recorded_stack(tmp_path: Path) -> None:
    stack_file = _client_file(tmp_path, "stack-client.properties")
    _recorded_stack(tmp_path, str(stack_file))
    home = {HOME_VAR: str(tmp_path)}
    recorded = resolve_cluster(None, home)
    assert recorded is not None and recorded.bootstrap_servers == "127.0.0.1:21001"
    assert recorded.security.file == str(stack_file)  # a secured stack's client file, without any variable set
    flagged = resolve_cluster("elsewhere:9092", home)
    assert flagged is not None and flagged.bootstrap_servers == "elsewhere:9092" and flagged.security == NO_SECURITY
    from_env = resolve_cluster(None, {**home, BOOTSTRAP_VAR: "env:9092"})
    assert from_env is not None and from_env.bootstrap_servers == "env:9092"
    assert resolve_cluster(None, {HOME_VAR: str(tmp_path / "nowhere")}) is None


def test_resolving_a_secured_stack_leaves_the_process_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job shell once set IKKAI_KAFKA_CONFIG for the executors to inherit; the context carries it now.

    Mutation: ``os.environ.setdefault(CONFIG_VAR, endpoints.kafka_config)`` back in ``resolve_cluster`` fails this.
    """
    monkeypatch.delenv(CONFIG_VAR, raising=False)
    monkeypatch.delenv(BOOTSTRAP_VAR, raising=False)
    monkeypatch.setenv(HOME_VAR, str(tmp_path))
    _recorded_stack(tmp_path, str(_client_file(tmp_path)))
    before = dict(os.environ)
    cluster = resolve_cluster()
    assert cluster is not None and cluster.security.protocol == "SASL_SSL"
    assert dict(os.environ) == before

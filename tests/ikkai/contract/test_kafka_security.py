"""One client-properties file in Kafka's names, read for Java clients as written and for librdkafka translated."""

from __future__ import annotations

from pathlib import Path

import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.kafka_security import (
    CONFIG_VAR,
    client_security,
    java_client_settings,
    librdkafka_settings,
    load_security,
    read_properties,
    spark_kafka_options,
)
from ikkai.errors import ConfigError

SCRAM = """\
# the file kafka-console-producer --command-config takes
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="ikkai" password="pa\\\\"ss;w=rd";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/ikkai/ca.pem
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_a_java_properties_file_is_read_with_continuations_comments_and_escapes(tmp_path: Path) -> None:
    properties = read_properties(_file(tmp_path, SCRAM + "! another comment\nclient.id : svc\\:1\n"))
    assert properties["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="ikkai" password="pa\\"ss;w=rd";'
    )
    assert properties["client.id"] == "svc:1"
    assert len(properties) == 6


def test_scram_over_tls_translates_to_librdkafka_names(tmp_path: Path) -> None:
    security = load_security(_file(tmp_path, SCRAM))
    assert librdkafka_settings(security) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ikkai",
        "sasl.password": 'pa"ss;w=rd', "ssl.ca.location": "/etc/ikkai/ca.pem",
    }  # fmt: skip
    assert java_client_settings(security) == {k: v for k, v in read_properties(_file(tmp_path, SCRAM)).items()}
    assert spark_kafka_options(security)["kafka.sasl.mechanism"] == "SCRAM-SHA-512"


def test_a_client_certificate_in_pem_or_pkcs12(tmp_path: Path) -> None:
    pem = load_security(_file(tmp_path, "security.protocol=SSL\nssl.keystore.type=PEM\n"
                                         "ssl.keystore.location=/k/client.pem\nssl.key.password=pw\n"))  # fmt: skip
    assert librdkafka_settings(pem) == {
        "security.protocol": "SSL", "ssl.certificate.location": "/k/client.pem", "ssl.key.location": "/k/client.pem",
        "ssl.key.password": "pw",
    }  # fmt: skip
    p12 = load_security(_file(tmp_path, "security.protocol=SSL\nssl.keystore.type=PKCS12\n"
                                         "ssl.keystore.location=/k/c.p12\nssl.keystore.password=pw\n"))  # fmt: skip
    assert librdkafka_settings(p12)["ssl.keystore.location"] == "/k/c.p12"


def test_oauthbearer_client_credentials(tmp_path: Path) -> None:
    security = load_security(_file(tmp_path, (
        "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.oauthbearer.token.endpoint.url=https://idp/token\n"
        'sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
        'clientId="svc" clientSecret="cs" scope="kafka";\n'
    )))  # fmt: skip
    assert librdkafka_settings(security) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "svc", "sasl.oauthbearer.client.secret": "cs",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.scope": "kafka",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "sasl.mechanism=GSSAPI"),
        (
            'security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config=x required username="u";\n',
            "lacks password",
        ),
        ("security.protocol=SSL\nssl.truststore.location=/t.jks\n", "ssl.truststore.type=JKS"),
        ("security.protocol=TLS\n", "security.protocol=TLS"),
        ("security.protocol=SSL\nssl.trustsore.location=/t.pem\n", "unknown key(s) ssl.trustsore.location"),
    ],
)
def test_what_a_client_cannot_use_is_refused_with_the_file_and_the_fix(tmp_path: Path, text: str, says: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_security(path)
    assert says in str(caught.value) and str(path) in str(caught.value)
    assert caught.value.fix


def test_secrets_never_show_in_a_repr_or_a_description(tmp_path: Path) -> None:
    security = load_security(_file(tmp_path, SCRAM))
    for text in (repr(security), str(security), security.describe()):
        assert 'pa"ss' not in text and "w=rd" not in text
    assert security.describe() == f"SASL_SSL, SCRAM-SHA-512 as 'ikkai' (from {tmp_path / 'client.properties'})"


def test_every_client_config_carries_the_file_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONFIG_VAR, str(_file(tmp_path, SCRAM)))
    assert client_security().protocol == "SASL_SSL"
    for config in (
        KafkaContext.from_environment("b:1").producer_config(),
        KafkaContext.from_environment("b:1").consumer_config("g"),
        KafkaContext.from_environment("b:1").client_config(),
    ):
        assert config["sasl.username"] == "ikkai" and config["security.protocol"] == "SASL_SSL"
    assert KafkaContext.from_environment("b:1").consumer_config("g")["isolation.level"] == "read_committed"
    monkeypatch.delenv(CONFIG_VAR)
    assert "security.protocol" not in KafkaContext.from_environment("b:1").producer_config()


def test_a_clusters_settings_are_derived_once_and_a_pickled_copy_carries_only_the_files_path(tmp_path: Path) -> None:
    import pickle

    cluster = KafkaContext("b:9092", load_security(_file(tmp_path, SCRAM)))
    assert cluster.client_config(**{"client.id": "x"}) == {
        "bootstrap.servers": "b:9092", **librdkafka_settings(cluster.security), "client.id": "x",
    }  # fmt: skip
    assert cluster.spark_options() == {"kafka.bootstrap.servers": "b:9092", **spark_kafka_options(cluster.security)}
    assert cluster.security.librdkafka is cluster.security.librdkafka  # derived once, kept with the configuration
    with pytest.raises(TypeError):
        cluster.security.librdkafka["sasl.password"] = "changed"  # type: ignore[index]  # read-only for every client
    shipped = pickle.dumps(cluster)
    assert b'pa"ss;w=rd' not in shipped and b"sasl.password" not in shipped  # no secret, no derived setting travels
    assert pickle.loads(shipped).client_config() == cluster.client_config()  # noqa: S301 - our own bytes: derived again

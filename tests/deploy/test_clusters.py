"""The clusters file: one Connect URL per environment, strict about what it accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.clusters import (
    DEFAULT_CLUSTERS,
    ClusterTarget,
    cluster_for,
    kafka_cluster,
    load_clusters,
    parse_clusters,
    resolve_connect_auth,
    resolve_connect_url,
)
from ikkai.errors import ConfigError


def test_the_shipped_file_names_dev_and_prod() -> None:
    targets = load_clusters(DEFAULT_CLUSTERS)
    assert targets["dev"].connect_url == "local"
    assert targets["prod"].connect_url.startswith("https://") and targets["prod"].wait_timeout_seconds == 300


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"dev": {"connect_url": "local", "timeout": 3}}, "dev.timeout: unknown key"),
        ({"dev": {"connect_url": "connect:8083"}}, "is not an http(s) URL"),
        ({"dev": {"connect_url": "local", "wait_timeout_seconds": "soon"}}, "must be a number"),
        (
            {"dev": {"connect_url": "local", "connect_timeout_seconds": 0}},
            "dev.connect_timeout_seconds: 0 is not a positive",
        ),
        (["dev"], "must map environment names"),
    ],
)
def test_bad_entries_are_rejected(data: object, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_clusters(data, "clusters.yaml")
    assert problem in str(caught.value)


def test_an_unknown_environment_lists_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text("staging: {connect_url: 'http://connect-staging:8083/'}\n")
    assert cluster_for("staging", path) == ClusterTarget("staging", "http://connect-staging:8083", 120.0)
    with pytest.raises(ConfigError, match="known: staging"):
        cluster_for("prod", path)


def test_local_prefers_the_external_cluster_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IKKAI_CONNECT_URL", "http://elsewhere:8083")
    monkeypatch.setenv("IKKAI_BOOTSTRAP_SERVERS", "elsewhere:9092")
    assert resolve_connect_url(ClusterTarget("dev", "local")) == "http://elsewhere:8083"
    assert resolve_connect_url(ClusterTarget("prod", "https://p:8083")) == "https://p:8083"


def test_a_cluster_names_its_credentials_file_and_never_holds_the_secret(tmp_path: Path) -> None:
    credentials = tmp_path / "connect.json"
    credentials.write_text(json.dumps({"username": "ops", "password": "pw", "ca": "/etc/ikkai/ca.pem"}))
    targets = parse_clusters(
        {"prod": {"connect_url": "https://connect:8083", "credentials": str(credentials)}}, "clusters.yaml"
    )
    auth = resolve_connect_auth(targets["prod"])
    assert (auth.username, auth.password, auth.ca) == ("ops", "pw", "/etc/ikkai/ca.pem")
    assert "pw" not in repr(auth)
    assert auth.requests_options() == {"verify": "/etc/ikkai/ca.pem", "auth": ("ops", "pw")}


def test_an_environment_names_its_kafka_cluster_and_client_file(tmp_path: Path) -> None:
    client = tmp_path / "client.properties"
    client.write_text("security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location=/etc/ca.pem\n")
    targets = parse_clusters({"prod": {"connect_url": "https://c:8083", "bootstrap_servers": "k1:9093,k2:9093",
                                       "kafka_config": str(client)}}, "clusters.yaml")  # fmt: skip
    cluster = kafka_cluster(targets["prod"])
    assert cluster.bootstrap_servers == "k1:9093,k2:9093" and cluster.security.protocol == "SSL"
    assert load_clusters(DEFAULT_CLUSTERS)["prod"].bootstrap_servers.startswith("kafka-1.prod")
    with pytest.raises(ConfigError, match=r"dev\.kafka_config: names a client file for the local cluster"):
        parse_clusters({"dev": {"connect_url": "local", "kafka_config": str(client)}}, "clusters.yaml")


def test_a_local_environment_takes_the_kafka_cluster_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IKKAI_BOOTSTRAP_SERVERS", "elsewhere:9092")
    monkeypatch.delenv("IKKAI_KAFKA_CONFIG", raising=False)
    assert kafka_cluster(ClusterTarget("dev", "local")).bootstrap_servers == "elsewhere:9092"

"""docs/kubernetes.md, taken literally: its KafkaConnect resource and its environment values are what Strimzi's
CRDs accept, agree with each other, and name the plugin archives ``ikkai plugins package`` writes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import stack.local_plugins as lp
from connectors.lint import blocking, lint_bundle
from connectors.render import load_bundle, render_bundle
from deploy.strimzi import StrimziTarget, kafka_connectors
from tests.connectors.conftest import SHIPPED
from tests.deploy.crd_schemas import validation_errors
from tests.docs.guide import read_guide

GUIDE = read_guide("kubernetes.md")
CONNECT = yaml.safe_load(GUIDE.files["kafka-connect.yaml"])
VALUES = GUIDE.files["values/k8s.yaml"]


@pytest.fixture
def outbox_k8s(tmp_path: Path) -> Path:
    folder = tmp_path / "outbox-sink"
    shutil.copytree(SHIPPED / "outbox-sink", folder)
    (folder / "values" / "k8s.yaml").write_text(VALUES)
    return folder


def test_the_environment_names_the_providers_the_connect_cluster_configures() -> None:
    worker = CONNECT["spec"]["config"]
    assert yaml.safe_load(VALUES)["config_providers"] == worker["config.providers"].split(",")
    assert worker["config.providers.secrets.class"] == "io.strimzi.kafka.KubernetesSecretConfigProvider"
    assert worker["exactly.once.source.support"] == "enabled"  # the source bundles require exactly-once


def test_the_build_installs_the_archives_ikkai_packages() -> None:
    urls = {p["name"]: p["artifacts"][0]["url"] for p in CONNECT["spec"]["build"]["plugins"]}
    for plugin in lp.PLUGINS:
        assert urls[plugin.name].endswith(f"/{plugin.name}-{lp.plugin_version(plugin)}.zip")


def test_the_guides_environment_lints_clean_and_exports_secrets_as_references(outbox_k8s: Path) -> None:
    rendered = render_bundle(load_bundle(outbox_k8s), "k8s")
    assert blocking(lint_bundle(rendered)) == []
    (resource,) = kafka_connectors(rendered, StrimziTarget(cluster=CONNECT["metadata"]["name"], namespace="kafka"))
    secrets = {k: v for k, v in resource["spec"]["config"].items() if k.endswith(".auth.secret")}
    assert len(secrets) == 2 and all(v.startswith("${secrets:kafka/outbox-api-credentials:") for v in secrets.values())


@pytest.mark.integration  # Strimzi's CRDs, generated from io.strimzi:api
def test_the_guides_resources_are_valid_for_strimzi(strimzi: dict[str, dict[str, Any]], outbox_k8s: Path) -> None:
    assert validation_errors(strimzi["KafkaConnect"], CONNECT) == []
    rendered = render_bundle(load_bundle(outbox_k8s), "k8s")
    for resource in kafka_connectors(rendered, StrimziTarget(cluster=CONNECT["metadata"]["name"], namespace="kafka")):
        assert validation_errors(strimzi["KafkaConnector"], resource) == []
    broken = yaml.safe_load(GUIDE.files["kafka-connect.yaml"])
    broken["spec"]["build"]["plugins"][0]["artifacts"][0]["type"] = "rar"
    assert validation_errors(strimzi["KafkaConnect"], broken)

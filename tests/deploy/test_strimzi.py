"""``ikkai bundle export --format strimzi``: KafkaConnector resources Strimzi's own CRD schema accepts,
secrets only as config-provider placeholders, the bundle's states and ikkai's labels."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from cli.bundle_export import export
from connectors.errors import PolicyViolation
from connectors.render import load_bundle, render_bundle
from deploy.strimzi import SPEC_KEYS, StrimziExportError, StrimziTarget, kafka_connectors, to_yaml
from tests.connectors.conftest import SHIPPED, BundleFactory
from tests.deploy.crd_schemas import validation_errors

GROUP = click.Group("bundle", commands={"export": export})  # registered under `ikkai bundle` in cli/bundle.py
STRIMZI_SECRET = "${secrets:kafka/payments-db:password}"  # noqa: S105 - a reference, not a secret
SOURCE_TEMPLATE = """{
  "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
  "tasks.max": {{ tasks_max | tojson }},
  "database.password": {{ password | tojson }},
  "exactly.once.support": "required",
  "producer.override.enable.idempotence": "true",
  "producer.override.acks": "all",
  "topic": "ingest.payments"
}"""


@pytest.fixture
def make_bundle(tmp_path: Path) -> BundleFactory:
    """A bundle written into a temporary folder: manifest dict, {template path: text}, {env: values dict}."""

    def make(manifest: dict[str, Any], templates: dict[str, str], values: dict[str, dict[str, Any]]) -> Path:
        folder = tmp_path / str(manifest["name"])
        (folder / "values").mkdir(parents=True)
        (folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
        for path, text in templates.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(text)
        for env, data in values.items():
            (folder / "values" / f"{env}.yaml").write_text(yaml.safe_dump(data))
        return folder

    return make


@pytest.fixture
def cdc_bundle(make_bundle: BundleFactory) -> Path:
    manifest = {
        "name": "cdc",
        "owner_prefix": "cdc.",
        "connectors": [{"name": "payments-db", "template": "templates/source.json.j2", "state": "paused"}],
    }
    values = {
        "k8s": {"password": STRIMZI_SECRET, "config_providers": ["secrets", "env"], "tasks_max": 2},
        "literal": {"password": "hunter2"},
        "dev": {"password": "${file:/etc/ikkai/db.properties:password}"},
    }
    return make_bundle(manifest, {"templates/source.json.j2": SOURCE_TEMPLATE}, values)


def test_a_connector_becomes_one_kafka_connector_with_its_state_labels_and_config(cdc_bundle: Path) -> None:
    rendered = render_bundle(load_bundle(cdc_bundle), "k8s")
    target = StrimziTarget(cluster="connect", namespace="kafka", max_restarts=5)
    (resource,) = kafka_connectors(rendered, target)
    assert resource["apiVersion"] == "kafka.strimzi.io/v1" and resource["kind"] == "KafkaConnector"
    assert resource["metadata"] == {
        "name": "cdc.payments-db",
        "namespace": "kafka",
        "labels": {
            "strimzi.io/cluster": "connect",
            "ikkai.dev/bundle": "cdc",
            "ikkai.dev/environment": "k8s",
            "app.kubernetes.io/managed-by": "ikkai",
        },
    }
    spec = resource["spec"]
    assert spec["class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert spec["tasksMax"] == 2 and spec["state"] == "paused"
    assert spec["autoRestart"] == {"enabled": True, "maxRestarts": 5}
    config = rendered.connectors[0].config
    assert spec["config"] == {k: v for k, v in config.items() if k not in SPEC_KEYS}
    assert not set(SPEC_KEYS) & set(spec["config"])
    assert spec["config"]["database.password"] == STRIMZI_SECRET  # the reference, resolved by the worker


def test_the_yaml_is_one_document_per_connector_and_reads_back_as_strings(cdc_bundle: Path) -> None:
    rendered = render_bundle(load_bundle(cdc_bundle), "k8s")
    resources = kafka_connectors(rendered) * 2
    text = to_yaml(resources)
    assert text.startswith("---\n") and text.count("\n---\n") == 1
    assert list(yaml.safe_load_all(text)) == resources  # "true" stays the string Connect wants, not a boolean
    assert kafka_connectors(rendered, StrimziTarget(auto_restart=False))[0]["spec"]["autoRestart"] == {"enabled": False}


def test_a_literal_secret_is_never_exported_even_when_the_lint_is_waived(make_bundle: BundleFactory) -> None:
    manifest = {
        "name": "cdc",
        "owner_prefix": "cdc.",
        "connectors": [
            {
                "name": "db",
                "template": "t.j2",
                "waivers": [{"check": "secret-placeholder", "reason": "a test of the export's own refusal"}],
            }
        ],
    }
    folder = make_bundle(manifest, {"t.j2": SOURCE_TEMPLATE}, {"dev": {"password": "hunter2"}})
    with pytest.raises(StrimziExportError, match=r"database\.password holds a literal value") as caught:
        kafka_connectors(render_bundle(load_bundle(folder), "dev"))
    assert "hunter2" not in str(caught.value) and "${secrets:" in str(caught.value)


def test_an_unwaived_literal_secret_fails_the_policy_lint_first(cdc_bundle: Path) -> None:
    with pytest.raises(PolicyViolation, match="secret-placeholder") as caught:
        kafka_connectors(render_bundle(load_bundle(cdc_bundle), "literal"))
    assert "hunter2" not in str(caught.value)


def test_a_placeholder_of_a_provider_the_environment_lacks_is_refused(cdc_bundle: Path) -> None:
    rendered = render_bundle(load_bundle(cdc_bundle), "dev", [f"password={STRIMZI_SECRET}"])
    with pytest.raises(PolicyViolation, match="config provider 'secrets'"):
        kafka_connectors(rendered)


@pytest.mark.parametrize(
    ("target", "match"),
    [
        (StrimziTarget(cluster="Not A Label!"), "not a valid Kubernetes label value"),
        (StrimziTarget(namespace="Kafka_NS"), "not a Kubernetes namespace name"),
        (StrimziTarget(api_version="v2"), "API version 'v2' is not known"),
    ],
)
def test_targets_kubernetes_would_refuse_are_errors(cdc_bundle: Path, target: StrimziTarget, match: str) -> None:
    with pytest.raises(StrimziExportError, match=match) as caught:
        kafka_connectors(render_bundle(load_bundle(cdc_bundle), "k8s"), target)
    assert caught.value.fix


def test_a_connector_name_kubernetes_cannot_hold_is_an_error(make_bundle: BundleFactory) -> None:
    manifest = {"name": "cdc", "owner_prefix": "cdc_", "connectors": [{"name": "db", "template": "t.j2"}]}
    folder = make_bundle(manifest, {"t.j2": SOURCE_TEMPLATE}, {"dev": {"password": "${env:DB_PASSWORD}"}})
    with pytest.raises(StrimziExportError, match="cdc_db: the connector name is not a valid Kubernetes"):
        kafka_connectors(render_bundle(load_bundle(folder), "dev"))


def test_the_cli_prints_yaml_on_stdout_and_only_yaml(cdc_bundle: Path) -> None:
    args = ["export", str(cdc_bundle), "--format", "strimzi", "-e", "k8s", "--cluster-label", "connect", "-n", "kafka"]
    result = CliRunner().invoke(GROUP, [*args, "--max-restarts", "3"])
    assert result.exit_code == 0, result.output
    (resource,) = yaml.safe_load_all(result.stdout)
    assert resource["metadata"]["labels"]["strimzi.io/cluster"] == "connect"
    assert resource["spec"]["autoRestart"] == {"enabled": True, "maxRestarts": 3}
    assert result.stderr == ""
    beta = CliRunner().invoke(GROUP, [*args, "--api-version", "v1beta2"])
    assert next(yaml.safe_load_all(beta.stdout))["apiVersion"] == "kafka.strimzi.io/v1beta2"
    refused = CliRunner().invoke(GROUP, ["export", str(cdc_bundle), "--format", "strimzi", "-e", "literal"])
    assert refused.exit_code != 0 and isinstance(refused.exception, PolicyViolation) and refused.stdout == ""


SHIPPED_EXPORTS = [
    ("payments-ingest", "dev"),
    ("payments-ingest", "prod"),
    ("outbox-sink", "prod"),
    ("postgres-cdc", "dev"),
    ("postgres-cdc", "prod"),
]


@pytest.mark.integration  # Maven resolves io.strimzi:api and its CRD generator; a JDK 21+ runs it
@pytest.mark.parametrize(("bundle", "env"), SHIPPED_EXPORTS)
def test_shipped_bundles_export_to_resources_strimzis_crd_accepts(
    strimzi: dict[str, dict[str, Any]], bundle: str, env: str
) -> None:
    rendered = render_bundle(load_bundle(SHIPPED / bundle), env)
    for target in (StrimziTarget(), StrimziTarget(namespace="kafka", max_restarts=10)):
        for resource in yaml.safe_load_all(to_yaml(kafka_connectors(rendered, target))):
            assert validation_errors(strimzi["KafkaConnector"], resource) == [], resource["metadata"]["name"]


@pytest.mark.integration
def test_the_crd_validation_catches_what_strimzi_would_refuse_or_drop(
    strimzi: dict[str, dict[str, Any]], cdc_bundle: Path
) -> None:
    crd = strimzi["KafkaConnector"]
    (good,) = kafka_connectors(render_bundle(load_bundle(cdc_bundle), "k8s"))
    assert validation_errors(crd, good) == []

    def broken(path: tuple[str, ...], value: Any) -> dict[str, Any]:
        resource = copy.deepcopy(good)
        node = resource
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        return resource

    assert validation_errors(crd, broken(("spec", "tasksMax"), 0))  # minimum 1
    assert validation_errors(crd, broken(("spec", "tasksMax"), "2"))  # an integer, not a string
    assert validation_errors(crd, broken(("spec", "state"), "started"))  # paused | stopped | running
    assert validation_errors(crd, broken(("spec", "autoRestart", "maxRetries"), 3))  # pruned: an unknown field
    assert validation_errors(crd, broken(("spec", "pause"), True))  # v1beta2's old field, gone in v1
    # The current operator serves v1 only: a v1beta2 export is for older operators.
    assert validation_errors(crd, broken(("apiVersion",), "kafka.strimzi.io/v1beta2")) == [
        "version 'v1beta2' is not served (served: ['v1'])"
    ]

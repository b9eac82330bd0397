"""Cluster export for Strimzi: one ``KafkaConnector`` custom resource per connector of a rendered bundle. Pure.

A Strimzi-managed Kafka Connect cluster is driven by its operator, not by ikkai's REST client: the
resources printed here are applied with ``kubectl apply -f`` (or committed to a GitOps repository)
and the operator creates, reconfigures, pauses, stops and auto-restarts the connectors. The same
bundle and the same environment values as ``ikkai bundle apply`` produce them, after the same policy
lint: a bundle that ``apply`` would refuse is refused here too.

Each resource is named after the connector (``<owner_prefix><name>``, the name Connect sees), carries
the label ``strimzi.io/cluster`` (the ``KafkaConnect`` resource that runs it) and ikkai's labels
(``ikkai.dev/bundle``, ``ikkai.dev/environment``), so one bundle's connectors can be listed or pruned
with a label selector. ``spec.config`` is the rendered config without the keys Strimzi sets itself
(``name``, ``connector.class``, ``tasks.max``, ``connector.plugin.version``). A secret is never
exported as a literal: every secret-named key must hold a placeholder of one of the environment's
``config_providers`` (e.g. ``${secrets:<namespace>/<secret>:<key>}`` for Strimzi's
``KubernetesSecretConfigProvider``), whatever a waiver says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from connectors.lint import PluginCatalog, lint_bundle, require_clean
from connectors.render import RenderedBundle, RenderedConnector
from connectors.secrets import placeholder_provider, secret_keys
from ikkai.errors import IkkaiError

GROUP = "kafka.strimzi.io"
# Strimzi 1.x (io.strimzi:api 1.2.0) serves only v1; v1beta2 is for operators that do not serve v1 yet.
API_VERSIONS = ("v1", "v1beta2")
DEFAULT_CLUSTER = "ikkai-connect"
CLUSTER_LABEL = "strimzi.io/cluster"
BUNDLE_LABEL = "ikkai.dev/bundle"
ENV_LABEL = "ikkai.dev/environment"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ikkai"}
# Keys Strimzi sets from spec (spec.class, spec.tasksMax, spec.version) and refuses in spec.config.
SPEC_KEYS = ("name", "connector.class", "tasks.max", "connector.plugin.version")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


class StrimziExportError(IkkaiError):
    """A connector cannot become a valid ``KafkaConnector`` resource (nothing is printed)."""

    def __init__(self, bundle: str, connector: str, problem: str, fix: str) -> None:
        super().__init__(f"bundle {bundle}: connector {connector}: {problem}", fix=fix)
        self.bundle = bundle
        self.connector = connector
        self.problem = problem


@dataclass(frozen=True)
class StrimziTarget:
    """Where the resources go: the ``KafkaConnect`` cluster's name and namespace, the API version, auto-restart."""

    cluster: str = DEFAULT_CLUSTER
    namespace: str | None = None
    api_version: str = "v1"
    auto_restart: bool = True
    max_restarts: int | None = None  # None: Strimzi's default, no limit


def kafka_connectors(rendered: RenderedBundle, target: StrimziTarget = StrimziTarget()) -> list[dict[str, Any]]:
    """The bundle's connectors as ``KafkaConnector`` resources, after the offline policy lint."""
    if target.api_version not in API_VERSIONS:
        raise StrimziExportError(
            rendered.name, "*", f"API version {target.api_version!r} is not known", f"use {' or '.join(API_VERSIONS)}"
        )
    _check_label(rendered.name, "--cluster-label", target.cluster)
    if target.namespace is not None and not (
        _DNS_SUBDOMAIN.match(target.namespace) and "." not in target.namespace and len(target.namespace) <= 63
    ):
        raise StrimziExportError(
            rendered.name, "*", f"namespace {target.namespace!r} is not a Kubernetes namespace name", "e.g. -n kafka"
        )
    require_clean(rendered, lint_bundle(rendered, PluginCatalog()))
    return [_resource(rendered, c, target) for c in rendered.connectors]


def _resource(rendered: RenderedBundle, c: RenderedConnector, target: StrimziTarget) -> dict[str, Any]:
    if len(c.name) > 253 or not _DNS_SUBDOMAIN.match(c.name):
        raise StrimziExportError(
            rendered.name,
            c.name,
            "the connector name is not a valid Kubernetes resource name (lower-case letters, digits, '-' and '.')",
            "rename it, or use an owner_prefix ending in '.' or '-' in bundle.yaml",
        )
    _check_secrets(rendered, c)
    metadata: dict[str, Any] = {"name": c.name}
    if target.namespace:
        metadata["namespace"] = target.namespace
    metadata["labels"] = {
        CLUSTER_LABEL: target.cluster,
        BUNDLE_LABEL: _label(rendered.name, c.name, rendered.name),
        ENV_LABEL: _label(rendered.name, c.name, rendered.env),
        **MANAGED_BY,
    }
    spec: dict[str, Any] = {"class": c.connector_class}
    if not spec["class"]:
        raise StrimziExportError(
            rendered.name, c.name, "has no connector.class", "set connector.class in the connector's template"
        )
    if "tasks.max" in c.config:
        spec["tasksMax"] = _tasks_max(rendered, c)
    if c.config.get("connector.plugin.version"):
        spec["version"] = c.config["connector.plugin.version"]
    spec["state"] = c.state
    spec["autoRestart"] = {"enabled": target.auto_restart}
    if target.auto_restart and target.max_restarts is not None:
        spec["autoRestart"]["maxRestarts"] = target.max_restarts
    spec["config"] = {k: v for k, v in sorted(c.config.items()) if k not in SPEC_KEYS}
    return {"apiVersion": f"{GROUP}/{target.api_version}", "kind": "KafkaConnector", "metadata": metadata, "spec": spec}


def _check_secrets(rendered: RenderedBundle, c: RenderedConnector) -> None:
    """Refuse a literal secret even when the lint's check is waived: an export ends up in a Git repository."""
    for key in sorted(secret_keys(c.config)):
        value = c.config[key]
        if not value.strip():
            continue
        provider = placeholder_provider(value)
        if provider is None or provider not in rendered.config_providers:
            what = "a literal value" if provider is None else f"a reference to the unknown provider {provider!r}"
            raise StrimziExportError(
                rendered.name,
                c.name,
                f"{key} holds {what}; a KafkaConnector must hold a config-provider placeholder",
                f"set it in values/{rendered.env}.yaml to e.g. ${{secrets:<namespace>/<secret>:<key>}} and list "
                f"the provider in config_providers (now: {', '.join(rendered.config_providers)})",
            )


def _tasks_max(rendered: RenderedBundle, c: RenderedConnector) -> int:
    raw = c.config["tasks.max"]
    if not raw.strip().isdigit() or int(raw) < 1:
        raise StrimziExportError(
            rendered.name, c.name, f"tasks.max is {raw!r}, not a whole number of at least 1", "fix tasks.max"
        )
    return int(raw)


def _label(bundle: str, connector: str, value: str) -> str:
    _check_label(bundle, connector, value)
    return value


def _check_label(bundle: str, where: str, value: str) -> None:
    if not value or len(value) > 63 or not _LABEL_VALUE.match(value):
        raise StrimziExportError(
            bundle,
            where,
            f"{value!r} is not a valid Kubernetes label value",
            "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        )


def to_yaml(resources: Sequence[Mapping[str, Any]]) -> str:
    """Multi-document YAML, one ``---`` per resource, keys in the order Kubernetes users read them."""
    return yaml.safe_dump_all(
        [dict(r) for r in resources], sort_keys=False, explicit_start=True, default_flow_style=False, width=1000
    )

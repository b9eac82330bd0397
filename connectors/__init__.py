"""Connector bundles: manifest + Jinja2 templates + per-environment values, rendering and policy lint.

A bundle folder holds ``bundle.yaml`` (``manifest``), ``templates/*.j2`` and ``values/<env>.yaml``.
``render_bundle`` turns it into one config per connector for an environment, ``lint_bundle``
checks those configs against the rules of docs/architecture.md. Everything here is pure apart
from reading the bundle folder; talking to Kafka Connect is deploy.reconcile's job. Shipped
bundles live in ``connectors/bundles/``; the sources of ikkai's single message transforms for
source bundles in ``connectors/plugins/ikkai-smt/`` (a Maven module, built by stack.local_plugins).
"""

from connectors.errors import BundleError, PolicyViolation
from connectors.lint import CHECKS, Finding, PluginCatalog, PluginInfo, lint_bundle, require_clean
from connectors.manifest import BundleManifest, ConnectorSpec, Waiver, load_manifest
from connectors.render import ConnectorBundle, RenderedBundle, RenderedConnector, load_bundle, render_bundle
from connectors.secrets import is_placeholder, redact

__all__ = [
    "CHECKS",
    "BundleError",
    "BundleManifest",
    "ConnectorBundle",
    "ConnectorSpec",
    "Finding",
    "PluginCatalog",
    "PluginInfo",
    "PolicyViolation",
    "RenderedBundle",
    "RenderedConnector",
    "Waiver",
    "is_placeholder",
    "lint_bundle",
    "load_bundle",
    "load_manifest",
    "redact",
    "render_bundle",
    "require_clean",
]

"""The bundle operations both the CLI and ``ikkai serve`` offer, each returning plain JSON-able data.

Resolves a bundle (a folder, or a name under connectors/bundles), renders it for an
environment and finds that environment's Connect cluster; the work itself is in
connectors.* (pure) and deploy.reconcile (I/O).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from connectors.lint import PluginCatalog, blocking, lint_bundle
from connectors.render import RenderedBundle, load_bundle, render_bundle
from connectors.secrets import redact
from deploy.clusters import (
    LOCAL,
    ClusterTarget,
    cluster_for,
    clusters_file,
    load_clusters,
    resolve_connect_auth,
    resolve_connect_url,
)
from deploy.connect_rest import ConnectClient
from deploy.reconcile import Progress, Reconciler
from ikkai.errors import ConfigError
from ikkai.resources import package_path
from ikkai.settings import external_endpoints

BUNDLES = package_path("connectors", "bundles")  # the shipped bundles, from the checkout or the wheel


@dataclass(frozen=True)
class BundleRequest:
    bundle: str  # a folder, or the name of a shipped bundle
    env: str
    overrides: tuple[str, ...] = ()
    connect_url: str | None = None  # overrides the clusters file
    clusters: Path | None = None
    wait_timeout: float | None = None


def bundle_folder(bundle: str) -> Path:
    path = Path(bundle)
    if path.is_dir():
        return path
    if (BUNDLES / bundle).is_dir():
        return BUNDLES / bundle
    known = ", ".join(sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())) if BUNDLES.is_dir() else "none"
    raise ConfigError("bundle", bundle, "is neither a folder nor a shipped bundle", fix=f"shipped bundles: {known}")


def rendered(request: BundleRequest) -> RenderedBundle:
    return render_bundle(load_bundle(bundle_folder(request.bundle)), request.env, request.overrides)


def cluster_target(env: str, connect_url: str | None, clusters: Path | None) -> ClusterTarget:
    """The environment's cluster; an explicit URL needs no clusters-file entry (but keeps its timeouts)."""
    if connect_url:
        known = load_clusters(clusters_file(clusters)).get(env)
        return replace(known, connect_url=connect_url) if known else ClusterTarget(env, connect_url)
    return cluster_for(env, clusters_file(clusters))


def connect_client(env: str, connect_url: str | None = None, clusters: Path | None = None) -> ConnectClient:
    """A REST client for the environment's Connect cluster, named after it in errors."""
    target = cluster_target(env, connect_url, clusters)
    if connect_url:
        where = f"env {env}, from --connect-url"
    elif target.connect_url == LOCAL:
        where = f"env {env}, from {'$IKKAI_CONNECT_URL' if external_endpoints() else 'the embedded stack'}"
    else:
        where = f"env {env}, from {clusters_file(clusters)}"
    return ConnectClient(
        resolve_connect_url(target), connect_timeout=target.connect_timeout_seconds, cluster=where,
        auth=resolve_connect_auth(target),
    )  # fmt: skip


def reconciler(
    request: BundleRequest, client: ConnectClient | None = None, progress: Progress | None = None
) -> Reconciler:
    """A reconciler for the environment's cluster; an explicit URL needs no clusters-file entry."""
    target = cluster_target(request.env, request.connect_url, request.clusters)
    if client is None:
        client = connect_client(request.env, request.connect_url, request.clusters)
    timeout = request.wait_timeout if request.wait_timeout is not None else target.wait_timeout_seconds
    return Reconciler(client, wait_timeout=timeout, progress=progress)


def render_data(request: BundleRequest) -> dict[str, Any]:
    bundle = rendered(request)
    return {
        "bundle": bundle.name,
        "env": bundle.env,
        "owner": bundle.bundle.manifest.owner,
        "connectors": [
            {"name": c.name, "template": c.spec.template, "state": c.state, "config": redact(c.config)}
            for c in bundle.connectors
        ],
    }


def lint_data(request: BundleRequest, *, offline: bool = True, client: ConnectClient | None = None) -> dict[str, Any]:
    """Findings of the policy lint. Offline (the default) key names mark secrets; online, the
    cluster's plugins also say which keys are PASSWORD-typed."""
    bundle = rendered(request)
    catalog = PluginCatalog() if offline else reconciler(request, client).catalog(bundle)
    findings = lint_bundle(bundle, catalog)
    return {
        "bundle": bundle.name,
        "env": bundle.env,
        "offline": offline,
        "findings": [f.as_dict() for f in findings],
        "errors": len(blocking(findings)),
        "waived": len(findings) - len(blocking(findings)),
    }


def plan_data(request: BundleRequest, *, prune: bool = False, client: ConnectClient | None = None) -> dict[str, Any]:
    bundle = rendered(request)
    return reconciler(request, client).plan(bundle, prune=prune).as_dict()


def apply_data(
    request: BundleRequest,
    *,
    prune: bool = False,
    client: ConnectClient | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    bundle = rendered(request)
    return reconciler(request, client, progress).apply(bundle, prune=prune).as_dict()


def status_data(request: BundleRequest, client: ConnectClient | None = None) -> dict[str, Any]:
    bundle = rendered(request)
    return {"bundle": bundle.name, "env": bundle.env, "connectors": reconciler(request, client).status(bundle)}


def restart_data(request: BundleRequest, *, failed_only: bool, client: ConnectClient | None = None) -> dict[str, Any]:
    bundle = rendered(request)
    restarted = reconciler(request, client).restart(bundle, failed_only=failed_only)
    return {"restarted": restarted, "failed_only": failed_only}


def delete_data(request: BundleRequest, client: ConnectClient | None = None) -> dict[str, Any]:
    bundle = rendered(request)
    return {"deleted": reconciler(request, client).delete(bundle)}


def overrides(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(values)

"""The bundle operations both the CLI and ``ikkai serve`` offer, each returning plain JSON-able data.

Resolves a bundle (a folder, or a name under connectors/bundles), renders it for an
environment and finds that environment's Connect cluster; the work itself is in
connectors.* (pure) and deploy.reconcile (I/O). Every apply goes through ``apply_data``, which records it
on ``_ikkai.applies`` afterwards (``deploy.applies``), best-effort: a record that cannot be written is one
warning line (stderr in the CLI, the log in ``ikkai serve``), never a failed apply.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from connectors.lint import PluginCatalog, blocking, lint_bundle
from connectors.render import RenderedBundle, load_bundle, render_bundle
from connectors.secrets import redact
from connectors.values import merge
from deploy import applies
from deploy.clusters import (
    LOCAL,
    ClusterTarget,
    cluster_for,
    clusters_file,
    kafka_cluster,
    load_clusters,
    resolve_connect_auth,
    resolve_connect_url,
)
from deploy.connect_rest import ConnectClient
from deploy.reconcile import ApplyFailed, Progress, Reconciler
from ikkai.errors import ConfigError, IkkaiError
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
    """The bundle rendered for the request's environment, its values beneath the bundle defaults including the
    environment's own (``environment_values``)."""
    bundle = load_bundle(bundle_folder(request.bundle))
    manifest = replace(bundle.manifest, defaults=merge(environment_values(request), bundle.manifest.defaults))
    return render_bundle(replace(bundle, manifest=manifest), request.env, request.overrides)


def environment_values(request: BundleRequest) -> dict[str, Any]:
    """What every bundle's templates may read of their environment, beneath the bundle's defaults (a bundle's
    values, its ``values/<env>.yaml`` and ``--set`` override it): ``kafka.bootstrap_servers``, the environment's
    Kafka cluster (the clusters file's ``bootstrap_servers``, else the embedded stack's or
    ``$IKKAI_BOOTSTRAP_SERVERS``); nothing when no Kafka cluster is known for the environment."""
    try:
        kafka = kafka_cluster(cluster_target(request.env, request.connect_url, request.clusters))
    except IkkaiError:
        return {}
    return {"kafka": {"bootstrap_servers": kafka.bootstrap_servers}}


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
    applied_by: str | None = None,
    record_unchanged: bool = True,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Apply, then record it (``deploy.applies``) as done by ``applied_by`` (default: this OS user at this host).

    ``record_unchanged=False`` (the reconcile loop) records only applies that wrote, deleted or failed. A record
    that cannot be written is one warning line, to ``warn``, else ``progress`` (stderr in the CLI), else (``-o
    json``, whose stderr is for an error object only) the result's ``record_warning``; the apply's result or
    error stands as it is.
    """
    bundle = rendered(request)
    who = applied_by or applies.cli_user()
    say = warn or progress
    try:
        result = reconciler(request, client, progress).apply(bundle, prune=prune)
    except IkkaiError as exc:
        touched = exc.rolled_back if isinstance(exc, ApplyFailed) else []
        warning = _record(request, bundle, who, applies.FAILED, touched)
        if warning:
            (say or _stderr)(warning)
        raise
    data = result.as_dict()
    if record_unchanged or result.written or result.deleted:
        warning = _record(request, bundle, who, applies.APPLIED, result.written)
        if warning and say:
            say(warning)
        elif warning:
            data["record_warning"] = warning
    return data


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _record(request: BundleRequest, bundle: RenderedBundle, who: str, result: str, written: Sequence[str]) -> str:
    """Best-effort: the record of an apply; "" when written, else one warning line saying why not."""
    value = applies.record_value(bundle, who=who, when=datetime.now(UTC), result=result, written=written)
    key = applies.key_of(bundle.env, bundle.name)
    try:
        kafka = kafka_cluster(cluster_target(request.env, request.connect_url, request.clusters))
        applies.record_apply(kafka, key, value)
    except Exception as exc:  # noqa: BLE001 - no failure to record may fail the apply; each is one warning line
        kind = "" if isinstance(exc, applies.RecordFailed) else f"apply of {key} not recorded: {type(exc).__name__}: "
        return f"warning: {(kind + str(exc)).splitlines()[0]}"
    return ""


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

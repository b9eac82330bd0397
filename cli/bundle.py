"""``ikkai bundle render|lint|plan|apply|status|restart|delete`` and ``ikkai serve``.

stdout carries results (text, or JSON with ``-o json``); errors go through cli/app.py's
one mapping to stderr and exit code 1. ``plan`` exits 2 when changes are pending, like
``terraform plan -detailed-exitcode``; ``lint`` exits 1 when a finding is not waived and asks no
Connect cluster unless ``--online``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cli.bundle_export import export
from cli.completion import complete_bundle
from cli.output import emit, output_option, progress_printer, say
from deploy import bundle_ops, bundle_output
from deploy.bundle_ops import BundleRequest

F = TypeVar("F", bound=Callable[..., Any])
EXIT_CHANGES_PENDING = 2


def bundle_options(function: F) -> F:
    options = [
        click.argument("bundle", shell_complete=complete_bundle),
        click.option("--env", "-e", default="dev", show_default=True, help="Environment: values/<env>.yaml."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a value (repeatable)."),
        output_option,
        click.option(
            "--connect-url", help="Kafka Connect REST URL (default: the environment's, from the clusters file)."
        ),
        click.option(
            "--clusters", type=click.Path(dir_okay=False, path_type=Path), help="Clusters file [env IKKAI_CLUSTERS]."
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _request(
    bundle: str,
    env: str,
    sets: tuple[str, ...],
    connect_url: str | None,
    clusters: Path | None,
    timeout: float | None = None,
) -> BundleRequest:
    return BundleRequest(
        bundle=bundle, env=env, overrides=sets, connect_url=connect_url, clusters=clusters, wait_timeout=timeout
    )


@click.group()
def bundle() -> None:
    """Connector bundles: render, lint, plan and apply them to an environment's Connect cluster."""


bundle.add_command(export)


@bundle.command()
@bundle_options
def render(
    bundle: str, env: str, sets: tuple[str, ...], output: str, connect_url: str | None, clusters: Path | None
) -> None:
    """Print each connector's rendered config (secret values redacted)."""
    emit(bundle_ops.render_data(_request(bundle, env, sets, connect_url, clusters)), output, bundle_output.render_text)


@bundle.command()
@bundle_options
@click.option(
    "--online/--offline",
    default=False,
    show_default=True,
    help="--online also asks the environment's Connect cluster which keys its plugins type PASSWORD; "
    "offline (the default) judges secrets by key names and needs no cluster.",
)
def lint(
    bundle: str,
    env: str,
    sets: tuple[str, ...],
    output: str,
    connect_url: str | None,
    clusters: Path | None,
    online: bool,
) -> None:
    """Check the rendered configs against the platform's policy. Exit 1 on an unwaived finding."""
    data = bundle_ops.lint_data(_request(bundle, env, sets, connect_url, clusters), offline=not online)
    emit(data, output, bundle_output.lint_text)
    if data["errors"]:
        sys.exit(1)


@bundle.command()
@bundle_options
@click.option("--prune", is_flag=True, help="Also plan deleting owned connectors that left the bundle.")
def plan(
    bundle: str,
    env: str,
    sets: tuple[str, ...],
    output: str,
    connect_url: str | None,
    clusters: Path | None,
    prune: bool,
) -> None:
    """Render, lint, validate and diff against the live cluster. Exit 2 when changes are pending."""
    data = bundle_ops.plan_data(_request(bundle, env, sets, connect_url, clusters), prune=prune)
    emit(data, output, bundle_output.plan_text)
    if not data["valid"]:
        sys.exit(1)
    if data["pending"]:
        sys.exit(EXIT_CHANGES_PENDING)


@bundle.command()
@bundle_options
@click.option("--prune", is_flag=True, help="Delete connectors with the bundle's owner prefix that left the bundle.")
@click.option("--timeout", type=float, help="Seconds to wait for connectors and tasks (default: the environment's).")
def apply(
    bundle: str,
    env: str,
    sets: tuple[str, ...],
    output: str,
    connect_url: str | None,
    clusters: Path | None,
    prune: bool,
    timeout: float | None,
) -> None:
    """Write what drifted, drive target states, wait for RUNNING; roll back on failure.

    While it waits, each change of a connector's or task's state is a line on stderr (not with -o json).
    """
    request = _request(bundle, env, sets, connect_url, clusters, timeout)
    data = bundle_ops.apply_data(request, prune=prune, progress=progress_printer(output))
    emit(data, output, bundle_output.apply_text)


@bundle.command()
@bundle_options
def status(
    bundle: str, env: str, sets: tuple[str, ...], output: str, connect_url: str | None, clusters: Path | None
) -> None:
    """Connectors and tasks of the bundle: state, worker, first line of any trace."""
    emit(bundle_ops.status_data(_request(bundle, env, sets, connect_url, clusters)), output, bundle_output.status_text)


@bundle.command()
@bundle_options
@click.option("--failed", is_flag=True, help="Restart only failed connectors and tasks (onlyFailed=true).")
def restart(
    bundle: str,
    env: str,
    sets: tuple[str, ...],
    output: str,
    connect_url: str | None,
    clusters: Path | None,
    failed: bool,
) -> None:
    """Restart the bundle's connectors with their tasks."""
    data = bundle_ops.restart_data(_request(bundle, env, sets, connect_url, clusters), failed_only=failed)
    emit(data, output, lambda d: "restarted: " + (", ".join(d["restarted"]) or "nothing"))


@bundle.command()
@bundle_options
def delete(
    bundle: str, env: str, sets: tuple[str, ...], output: str, connect_url: str | None, clusters: Path | None
) -> None:
    """Delete the bundle's connectors (only those named in the bundle)."""
    data = bundle_ops.delete_data(_request(bundle, env, sets, connect_url, clusters))
    emit(data, output, lambda d: "deleted: " + (", ".join(d["deleted"]) or "nothing"))


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8484, show_default=True)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File (mode 600) holding the bearer token, or 'env, env: token' lines [default: $IKKAI_SERVE_TOKEN].",
)
@click.option(
    "--insecure-http", is_flag=True,
    help="Allow plain HTTP on a non-loopback --host (the token travels in clear): behind a TLS proxy only.",
)  # fmt: skip
@click.option(
    "--bundles-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=bundle_ops.BUNDLES,
    show_default=True,
    help="The only folder bundles are served from.",
)
@click.option("--connect-url", help="Kafka Connect REST URL for every environment (default: the clusters file).")
@click.option("--clusters", type=click.Path(dir_okay=False, path_type=Path), help="Clusters file [env IKKAI_CLUSTERS].")
@click.option(
    "--reconcile",
    "targets",
    multiple=True,
    metavar="BUNDLE/ENV",
    help="Re-apply this bundle on an interval and auto-restart its failed tasks (repeatable).",
)
@click.option("--interval", type=float, default=30.0, show_default=True, help="Seconds between reconcile runs.")
@click.option(
    "--health-interval", type=click.FloatRange(min=1.0), default=20.0, show_default=True,
    help="Seconds between background samples of each environment's exactly-once health (the page, /metrics).",
)  # fmt: skip
@click.option("--backoff-base", type=float, default=2.0, show_default=True, help="First auto-restart backoff, seconds.")
@click.option("--backoff-cap", type=float, default=300.0, show_default=True, help="Longest auto-restart backoff.")
@click.option(
    "--max-restarts", type=click.IntRange(min=1),
    help="Stop auto-restarting a connector still FAILED after this many restarts (default: no limit).",
)  # fmt: skip
@click.option(
    "--state-file", type=click.Path(dir_okay=False, path_type=Path),
    help="Where restart counts survive a restart of serve [default: $IKKAI_HOME/auto-restart.json].",
)  # fmt: skip
@click.option(
    "--tls-cert", type=click.Path(dir_okay=False, path_type=Path), envvar="IKKAI_SERVE_TLS_CERT",
    help="Serve HTTPS: the server's certificate chain, PEM (with --tls-key). [env IKKAI_SERVE_TLS_CERT]",
)  # fmt: skip
@click.option(
    "--tls-key", type=click.Path(dir_okay=False, path_type=Path), envvar="IKKAI_SERVE_TLS_KEY",
    help="The certificate's private key, PEM, unencrypted (may be the --tls-cert file). [env IKKAI_SERVE_TLS_KEY]",
)  # fmt: skip
@click.option(
    "--tls-client-ca", type=click.Path(dir_okay=False, path_type=Path), envvar="IKKAI_SERVE_TLS_CLIENT_CA",
    help="Require client certificates signed by this CA, PEM (mutual TLS). [env IKKAI_SERVE_TLS_CLIENT_CA]",
)  # fmt: skip
@click.option(
    "--server-name", "server_names", multiple=True, metavar="NAME",
    help="A name clients use in the Host header (repeatable); others get 421. [default: localhost and the "
    "loopback addresses on a loopback --host, else --host itself; required on every interface]",
)  # fmt: skip
@click.option(
    "--tls-proxy", is_flag=True,
    help="Browsers reach this server over HTTPS through a TLS-terminating proxy: the page's cookie is Secure.",
)  # fmt: skip
@click.option(
    "--forwarded-allow-ips", metavar="ADDRESSES", default="",
    help="The proxy (comma-separated addresses or networks) whose X-Forwarded-For/-Proto are believed "
    "[default: no one].",
)  # fmt: skip
def serve(
    host: str,
    port: int,
    token_file: Path | None,
    insecure_http: bool,
    bundles_dir: Path,
    connect_url: str | None,
    clusters: Path | None,
    targets: tuple[str, ...],
    interval: float,
    health_interval: float,
    backoff_base: float,
    backoff_cap: float,
    max_restarts: int | None,
    state_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    server_names: tuple[str, ...],
    tls_proxy: bool,
    forwarded_allow_ips: str,
) -> None:
    """Serve plan/apply/status/restart over HTTP or HTTPS (bearer token), /healthz and /metrics."""
    import logging
    import os
    import sys
    import threading

    from deploy.auto_restart import RestartBackoff, RestartStateFile
    from deploy.serve.audit import AUDIT
    from deploy.serve.http import make_server
    from deploy.serve.service import ControlPlane, ReconcileLoop, ServeTLS, check_plain_http, read_tokens
    from deploy.serve.site import ServeSite
    from ikkai.settings import ikkai_home

    plane = ControlPlane(read_tokens(os.environ, token_file), bundles_dir, connect_url, clusters,
                         health_seconds=health_interval)  # fmt: skip
    pairs = []
    for target in targets:
        bundle_name, sep, env = target.partition("/")
        if not sep:
            raise click.BadParameter(f"{target!r} is not BUNDLE/ENV", param_hint="--reconcile")
        plane.request(bundle_name, env)
        pairs.append((bundle_name, env))
    tls = ServeTLS.of(tls_cert, tls_key, tls_client_ca)
    check_plain_http(host, tls, insecure_http or tls_proxy)
    proxies = tuple(a.strip() for a in forwarded_allow_ips.split(",") if a.strip())
    site = ServeSite.of(host, server_names, https=tls_proxy, proxies=proxies)
    if not AUDIT.handlers:  # the audit log goes to stderr, beside the server's own lines
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s audit %(message)s"))
        AUDIT.addHandler(handler)
        AUDIT.setLevel(logging.INFO)
    server = make_server(plane, host, port, tls, site)
    loop = None
    if pairs:
        loop = ReconcileLoop(
            plane,
            pairs,
            interval=interval,
            backoff=RestartBackoff(base=backoff_base, cap=backoff_cap, max_restarts=max_restarts),
            state_file=RestartStateFile(state_file or ikkai_home() / "auto-restart.json"),
        )
        threading.Thread(target=loop.run, name="ikkai-reconcile", daemon=True).start()
    scheme = "https" if tls else "http"
    say(f"serving on {scheme}://{host}:{server.port}")
    try:
        server.serve_forever()
    finally:
        plane.stopping.set()  # the health sampler
        if loop:
            loop.stopping.set()
        server.server_close()

"""``ikkai serve``: the bundle operations over HTTP for automation, plus an optional reconcile loop.

This module holds what the routes do and the loop; the routes themselves are ``deploy.serve.app``
(Starlette) and the server ``deploy.serve.http`` (uvicorn, with its timeouts and limits).

  GET  /healthz                              liveness, no token needed; "degraded" with a reason
                                             while the reconcile loop's last pass failed
  GET  /metrics                              Prometheus text format
  GET  /bundles/<bundle>/<env>/plan          plan (JSON); ?prune=true
  POST /bundles/<bundle>/<env>/apply         apply (JSON); ?prune=true; recorded on _ikkai.applies as by
                                             "ikkai serve" (deploy.applies; the page's applies name
                                             the name given at its login)
  GET  /bundles/<bundle>/<env>/status        status (JSON)
  POST /bundles/<bundle>/<env>/restart       restart; ?failed=true restarts failed tasks only

Every route but /healthz needs ``Authorization: Bearer <token>``; the token comes from
$IKKAI_SERVE_TOKEN or a file, and the server refuses to start without one. With a certificate
and key (PEM) it speaks HTTPS only, and with a client CA it also requires a client certificate
signed by that CA (mutual TLS); the bearer token is needed all the same. Bundles are
looked up by name in one folder only (no paths from the request). The loop re-applies
its bundles every interval and restarts failed connectors with capped exponential backoff, at
most ``max_restarts`` times; restart counts and times live in a state file
(``$IKKAI_HOME/auto-restart.json``) so that a restarted service goes on where it stopped. No
exception ends the loop (see ``ReconcileLoop``).
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy import bundle_ops
from deploy.auto_restart import RestartBackoff, RestartStateFile
from deploy.bundle_ops import BundleRequest
from deploy.connector_status import failure
from deploy.serve.metrics import Metrics
from deploy.serve.throttle import FailureThrottle
from deploy.serve.tokens import TOKEN_VAR, ServeTokens, read_token, read_tokens
from ikkai.errors import ConfigError, IkkaiError

TLS_CERT_VAR = "IKKAI_SERVE_TLS_CERT"
TLS_KEY_VAR = "IKKAI_SERVE_TLS_KEY"
TLS_CLIENT_CA_VAR = "IKKAI_SERVE_TLS_CLIENT_CA"
MAX_PAUSE_SECONDS = 300.0  # the longest wait after failed reconcile passes
KEPT_ERRORS = 100  # a long-running loop keeps only its latest errors

log = logging.getLogger("ikkai.serve")
SERVE = "ikkai serve"  # who applied through the API, in the record of applies: the tokens carry no names
LOOP = "ikkai serve reconcile loop"


@dataclass
class ControlPlane:
    """What the HTTP handler and the loop share: where bundles are, how to reach Connect, metrics."""

    token: str | ServeTokens  # a str: one token for every environment
    bundles_dir: Path
    connect_url: str | None = None
    clusters: Path | None = None
    metrics: Metrics = field(default_factory=Metrics)
    degraded: str | None = None  # why the reconcile loop is not well, for /healthz; None while it is
    throttle: FailureThrottle = field(default_factory=FailureThrottle)  # wrong tokens per peer: login and API
    # Every environment's exactly-once health is sampled this often in the background (deploy.serve.page's
    # HealthSampler, started with the page); None: only when a view asks.
    health_seconds: float | None = None
    stopping: threading.Event = field(default_factory=threading.Event)  # set: background work ends
    # (bundle, environment) → the ``--set`` overrides its renders take here, as the one who applies it passes them
    # (the demo: its run's file paths and receiver URL), so the page plans what was applied, not the values alone.
    overrides: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    @property
    def tokens(self) -> ServeTokens:
        return ServeTokens.single(self.token) if isinstance(self.token, str) else self.token

    def health(self) -> dict[str, str]:
        """The server's liveness, as ``/healthz`` shows it: ok, or degraded with the reconcile loop's reason."""
        reason = self.degraded
        return {"status": "ok"} if reason is None else {"status": "degraded", "reason": reason}

    def request(self, bundle: str, env: str) -> BundleRequest:
        folder = self.bundles_dir / bundle
        if not (folder / "bundle.yaml").is_file():
            raise ConfigError("serve", bundle, "no such bundle", fix=f"bundles live in {self.bundles_dir}")
        return BundleRequest(str(folder), env, self.overrides.get((bundle, env), ()), connect_url=self.connect_url,
                             clusters=self.clusters)  # fmt: skip

    def run(
        self, bundle: str, env: str, verb: str, query: dict[str, list[str]], *, who: str = SERVE
    ) -> tuple[int, dict[str, Any]]:
        """Plan, status, restart or apply; an apply recorded as by ``who`` (``deploy.applies``)."""
        request = self.request(bundle, env)

        def flag(name: str) -> bool:
            return query.get(name, ["false"])[0].lower() == "true"

        if verb == "plan":
            return 200, bundle_ops.plan_data(request, prune=flag("prune"))
        if verb == "status":
            return 200, bundle_ops.status_data(request)
        if verb == "restart":
            return 200, bundle_ops.restart_data(request, failed_only=flag("failed"))
        return 200, self.apply(bundle, env, prune=flag("prune"), who=who)

    def apply(
        self, bundle: str, env: str, *, prune: bool = False, loop: bool = False, who: str = SERVE
    ) -> dict[str, Any]:
        """Apply the bundle, counted in the metrics and recorded (``deploy.applies``) as by ``who`` (``ikkai
        serve`` for the API; the page names its user); by the reconcile loop (``loop``) only when it wrote,
        deleted or failed."""
        request = self.request(bundle, env)
        try:
            data = bundle_ops.apply_data(
                request, prune=prune, applied_by=LOOP if loop else who, record_unchanged=not loop, warn=log.warning
            )
        except IkkaiError:
            self.metrics.count_apply(bundle, env, "error")
            raise
        self.metrics.count_apply(bundle, env, "ok")
        return data


class ReconcileLoop:
    """Re-apply bundles every ``interval`` and restart failed connectors with capped backoff.

    No exception ends the loop: whatever a pass raises (an ``IkkaiError``, or anything else, such as
    a proxy's non-JSON answer) is logged, counted in ``ikkai_reconcile_failures_total`` by kind and
    shown in ``/healthz`` as ``degraded`` with its reason; after a failed pass the loop waits twice as
    long as after the one before, up to ``MAX_PAUSE_SECONDS`` (or ``interval``, when that is longer),
    and the first clean pass clears it all.
    """

    def __init__(
        self,
        plane: ControlPlane,
        targets: list[tuple[str, str]],
        *,
        interval: float,
        backoff: RestartBackoff | None = None,
        clock: Callable[[], float] = time.time,
        state_file: RestartStateFile | None = None,
    ) -> None:
        self.plane = plane
        self.targets = targets
        self.interval = interval
        self.backoff = backoff or RestartBackoff()
        self.clock = clock  # wall clock: restart times are kept in the state file across restarts
        self.state_file = state_file
        if state_file is not None:
            state_file.load_into(self.backoff)
        self.stopping = threading.Event()
        self.errors: list[str] = []  # the latest KEPT_ERRORS, newest last
        self.failed_passes = 0  # in a row

    def once(self) -> None:
        failures = []
        for bundle, env in self.targets:
            for step in (self._apply, self._restart_failed):
                try:
                    step(bundle, env)
                except Exception as exc:  # noqa: BLE001 - the loop outlives any one failure; each is logged and counted
                    failures.append(self._failed(bundle, env, exc))
        self.failed_passes = self.failed_passes + 1 if failures else 0
        self.plane.degraded = f"reconcile: {failures[-1]}" if failures else None
        self.plane.metrics.count_reconcile_run()

    def _failed(self, bundle: str, env: str, exc: Exception) -> str:
        kind = type(exc).__name__
        reason = f"{bundle}/{env}: {exc}" if isinstance(exc, IkkaiError) else f"{bundle}/{env}: {kind}: {exc}"
        reason = reason.splitlines()[0]
        if isinstance(exc, IkkaiError):
            log.warning("%s", reason)
        else:  # not one of ours: the trace is what a person needs
            log.error("%s", reason, exc_info=exc)
        self.errors = [*self.errors, str(exc)][-KEPT_ERRORS:]
        self.plane.metrics.count_reconcile_failure(kind)
        return reason

    def pause(self) -> float:
        """Seconds until the next pass: ``interval``, doubled for each failed pass in a row, capped."""
        if self.failed_passes == 0:
            return self.interval
        longest = max(self.interval, MAX_PAUSE_SECONDS)
        return min(longest, self.interval * 2.0 ** min(self.failed_passes, 32))

    def _apply(self, bundle: str, env: str) -> None:
        self.plane.apply(bundle, env, loop=True)

    def _restart_failed(self, bundle: str, env: str) -> None:
        request = self.plane.request(bundle, env)
        reconciler = bundle_ops.reconciler(request)
        live = reconciler.live()
        now = self.clock()
        changed = False
        for c in bundle_ops.rendered(request).connectors:
            current = live.get(c.name)
            if current is None:
                continue
            key = f"{env}/{c.name}"  # connector names are unique per cluster, and each env has its own
            self.plane.metrics.saw_connector(bundle, env, c.name, current.state or "UNKNOWN")
            if not failure(current.status):
                changed |= self.backoff.healthy(key, now)
            elif self.backoff.due(key, now):
                reconciler.client.restart_connector(c.name, include_tasks=True, only_failed=True)
                self.backoff.restarted(key, now)
                changed = True
                self.plane.metrics.count_restart(c.name)
            self.plane.metrics.note_exhausted(c.name, exhausted=self.backoff.exhausted(key))
        if changed and self.state_file is not None:
            self.state_file.save(self.backoff)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.once()
                self.stopping.wait(self.pause())
        finally:
            if not self.stopping.is_set():  # only BaseException gets here (the interpreter is going)
                self.plane.degraded = "reconcile loop stopped"


def check_plain_http(host: str, tls: ServeTLS | None, insecure_http: bool) -> None:
    """Plain HTTP sends the bearer token in clear: on a non-loopback address only when asked for by name."""
    if tls is not None or insecure_http or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False  # a host name: it may resolve to anything
    if not loopback:
        raise ConfigError(
            "serve",
            f"--host {host}",
            "plain HTTP on a non-loopback address would send the bearer token in clear",
            fix="serve HTTPS (--tls-cert/--tls-key), or add --insecure-http behind a TLS-terminating proxy",
        )


@dataclass(frozen=True)
class ServeTLS:
    """The server's certificate chain and key (PEM), and the CA its clients' certificates must chain to."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @classmethod
    def of(cls, cert: Path | None, key: Path | None, client_ca: Path | None) -> ServeTLS | None:
        """From ``--tls-cert``/``--tls-key``/``--tls-client-ca`` (or their variables); None for plain HTTP."""
        if cert is None and key is None:
            if client_ca is not None:
                raise ConfigError(
                    "serve",
                    "--tls-client-ca",
                    "needs --tls-cert and --tls-key",
                    fix="client certificates are checked only over HTTPS: name the server's too",
                )
            return None
        if cert is None or key is None:
            given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
            raise ConfigError(
                "serve",
                missing,
                f"missing while {given} is given",
                fix=f"name both (or ${TLS_CERT_VAR} and ${TLS_KEY_VAR}), or neither for plain HTTP",
            )
        return cls(cert, key, client_ca)

    def context(self) -> ssl.SSLContext:
        """A server context (TLS 1.2+); a missing, unreadable or mismatched file is one ConfigError naming it."""
        named = {"--tls-cert": self.cert, "--tls-key": self.key}
        if self.client_ca is not None:
            named["--tls-client-ca"] = self.client_ca
        for option, path in named.items():
            try:
                path.read_bytes()
            except OSError as exc:
                raise ConfigError(
                    "serve",
                    f"{option} {path}",
                    f"cannot be read: {exc.strerror}",
                    fix="name a PEM file this user can read",
                ) from exc
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise ConfigError(
                    "serve",
                    f"--tls-key {self.key}",
                    f"is not the key of the certificate in {self.cert}",
                    fix="name the key the certificate was issued for",
                ) from exc
            raise ConfigError(
                "serve",
                f"--tls-cert {self.cert} / --tls-key {self.key}",
                f"not a PEM certificate chain and unencrypted private key ({exc.reason})",
                fix="convert with openssl (x509 -outform PEM; pkey -out key.pem)",
            ) from exc
        if self.client_ca is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca)
            except ssl.SSLError as exc:
                raise ConfigError(
                    "serve",
                    f"--tls-client-ca {self.client_ca}",
                    f"holds no PEM CA certificate ({exc.reason})",
                    fix="name the PEM file of the CA that signs the clients' certificates",
                ) from exc
            context.verify_mode = ssl.CERT_REQUIRED
        return context


__all__ = [
    "TOKEN_VAR", "ControlPlane", "Metrics", "ReconcileLoop", "ServeTLS", "ServeTokens", "check_plain_http",
    "read_token", "read_tokens",
]  # fmt: skip

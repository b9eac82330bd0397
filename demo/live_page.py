"""The operator page of ``ikkai serve`` during the demo: the run seen live, on loopback, for its own stack.

The demo starts the same server ``ikkai serve`` runs (``deploy.serve.http``), in a thread of its own
process, on 127.0.0.1 and a free port, pointed at the demo's stack through a clusters file of one
environment (``dev``, the environment the demo applies its bundles to). Its login token is random per
run and lives only in a 0600 file of the run folder (0700); the demo prints the file's path, never the
token. The page stops with the demo; ``--keep`` keeps the stack, not the page (``ikkai serve`` with
the printed clusters file shows it again).

The demo applies its two bundles with its own file paths, partitions, bootstrap servers and receiver URL as
``--set`` overrides; it hands each request to the page first (``renders_as``), whose plans and connectors table
then render the bundle with the same overrides: an applied bundle nothing changed reads "in sync", as it is.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

import requests
import yaml

from deploy.bundle_ops import BUNDLES, BundleRequest
from deploy.serve.http import ServiceServer, make_server
from deploy.serve.page.health_sampler import DEFAULT_SECONDS as HEALTH_SECONDS
from deploy.serve.service import ControlPlane
from deploy.serve.tokens import ServeTokens
from ikkai.settings import Endpoints
from stack.stack_security import private_dir, write_private

ENV = "dev"
TOKEN_FILE = "page-token"  # noqa: S105 - the name of the file, not a token
CLUSTERS_FILE = "page-clusters.yaml"
ASKED = ("flow", "health")  # the views asked after the run (``answers``): the demo's invariant after broker kills
ASK_SECONDS = 30.0  # the longest one answer is waited for (each view answers from its caches within seconds)


class LivePage:
    """The page server for one demo run: ``start`` returns the URL to open, ``stop`` ends it."""

    def __init__(self, run_dir: Path, endpoints: Endpoints) -> None:
        self.run_dir = run_dir
        self.endpoints = endpoints
        self.token_file = run_dir / TOKEN_FILE
        self.clusters_file = run_dir / CLUSTERS_FILE
        self._server: ServiceServer | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._overrides: dict[tuple[str, str], tuple[str, ...]] = {}  # the page's plane's (ControlPlane.overrides)

    def start(self) -> str:
        private_dir(self.run_dir)
        token = secrets.token_urlsafe(32)  # 256 bits (ikkai serve refuses a token under 128)
        write_private(self.token_file, token + "\n")
        cluster = {"connect_url": self.endpoints.connect_url, "bootstrap_servers": self.endpoints.bootstrap_servers}
        self.clusters_file.write_text(yaml.safe_dump({ENV: cluster}))
        plane = ControlPlane(
            ServeTokens(((token, frozenset({ENV})),)),
            BUNDLES,
            self.endpoints.connect_url,
            self.clusters_file,
            health_seconds=HEALTH_SECONDS,  # sampled whether or not the page is open, as ikkai serve does
            overrides=self._overrides,
        )
        self._stopping = plane.stopping
        self._server = make_server(plane)  # 127.0.0.1, a free port, plain HTTP: loopback only
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-page", daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._server.port}/ui/env/{ENV}/flow"

    def answers(self) -> dict[str, int | str]:
        """Each of ``ASKED`` views, asked as a browser would (logged in with the run's token): view → its HTTP
        status, or why it gave none; the server's thread, when it has ended."""
        if self._server is None or self._thread is None or not self._thread.is_alive():
            return {"server": "not running"}
        base = f"http://127.0.0.1:{self._server.port}"
        session = requests.Session()
        session.headers["Origin"] = base  # as a browser sends it with a form
        found: dict[str, int | str] = {}
        try:
            token = self.token_file.read_text().strip()
            login = session.post(f"{base}/ui/login", data={"token": token}, allow_redirects=False, timeout=ASK_SECONDS)
            if login.status_code != 303:
                return {"login": login.status_code}
            for view in ASKED:
                found[view] = session.get(f"{base}/ui/env/{ENV}/{view}", timeout=ASK_SECONDS).status_code
        except (OSError, requests.RequestException) as exc:
            found[next((v for v in ASKED if v not in found), "login")] = type(exc).__name__
        return found

    def renders_as(self, request: BundleRequest) -> None:
        """The page renders ``request``'s bundle in its environment with the request's overrides, as applied."""
        self._overrides[Path(request.bundle).name, request.env] = request.overrides

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._thread.join(10)
        self._server.server_close()
        self._server = None

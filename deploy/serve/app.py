"""The routes of ``ikkai serve`` as a Starlette application: bearer token, size limit, request metrics.

What each route does lives in ``deploy.serve.service`` (``ControlPlane``); this module only maps HTTP onto
it. Every route but ``/healthz`` and the page needs ``Authorization: Bearer <token>``, checked before
routing so that a caller without the token learns nothing about which paths exist; a bundle route also
needs a token that covers its environment (``deploy.serve.tokens``), else 403. The operator page is
mounted at ``/ui`` (``deploy.serve.page``): it takes no bearer header but a login that turns the same token
into a session (the cookie holds only its id), and checks that session and a CSRF token itself. Before
any of that, every request's ``Host`` must name this server (421) and a POST's ``Origin``, when present,
must be this server's own (403; the page's POSTs must carry one), as ``deploy.serve.site`` says; wrong
bearer tokens are counted per peer (``deploy.serve.throttle``, 429 past the limit) and every API action
(apply, restart) is a line of the audit log (``deploy.serve.audit``). Every response carries a
``Content-Security-Policy`` with ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY``: no page of
another origin, another local port included, may frame the page. No API route takes a
body (the page's small forms do): a request announcing one larger than ``MAX_BODY_BYTES`` (or a
chunked one, whose size is unknown) is refused with 413 before any route runs, and a request line and
headers over ``MAX_HEADER_BYTES`` with 431. Bundle operations call Connect and may take minutes, so
they run on Starlette's thread pool, never on the event loop that serves ``/healthz``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.schemas import SchemaGenerator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from connectors.manifest import BUNDLE_NAME, ENVIRONMENT_NAME
from deploy.serve.audit import NOBODY, audit, fingerprint
from deploy.serve.metrics import CONTENT_TYPE
from deploy.serve.outgoing import RedactedResponses
from deploy.serve.page import page_app
from deploy.serve.service import ControlPlane, ServeTokens
from deploy.serve.site import ServeSite
from deploy.serve.throttle import peer
from ikkai.errors import IkkaiError

MAX_BODY_BYTES = 64 * 1024  # no route reads a body: this only bounds what a client may announce
MAX_HEADER_BYTES = 16 * 1024  # request line and headers together
_METHOD = {"plan": "GET", "status": "GET", "apply": "POST", "restart": "POST"}
_OPEN = ("/healthz",)
PAGE = "/ui"  # the operator page: its own login and session cookie instead of the bearer header
ENVIRONMENTS = "ikkai.environments"  # set in the ASGI scope by Guard: what the caller's token covers
WHO = "ikkai.who"  # set in the ASGI scope by Guard: the caller's token's fingerprint, for the audit log
PAGE_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
OTHER_POLICY = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"  # JSON, SVG charts, CSS
_SHOWN_HOST = 100  # characters of a refused Host quoted back


def json_response(status: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(data, sort_keys=True), status_code=status, media_type="application/json",
                    headers=headers)  # fmt: skip


def metric_route(path: str) -> str:
    """The ``route`` label: the fixed paths by name, the page as ``/ui``, everything else as ``/bundles``
    (bounded cardinality)."""
    if path == PAGE or path.startswith(f"{PAGE}/"):
        return PAGE
    return path if path in ("/healthz", "/metrics", "/openapi.json") else "/bundles"


class Guard:
    """Counts every response and gives it the framing and content policy; refuses oversized headers (431) or
    bodies (413), a foreign ``Host`` (421) or ``Origin`` (403), and a missing or wrong token (401, or 429 for a
    peer past the wrong-token limit)."""

    def __init__(self, app: ASGIApp, plane: ControlPlane, site: ServeSite) -> None:
        self.app = app
        self.plane = plane
        self.site = site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = metric_route(scope["path"])

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.plane.metrics.count_request(route, message["status"])
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _POLICY_HEADERS]
                html = any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in kept)
                policy = PAGE_POLICY if html else OTHER_POLICY
                message = {**message, "headers": [*kept, *_policy_headers(policy)]}
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, counted)
            return
        await self.app(scope, receive, counted)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> Response | None:
        size = len(scope["raw_path"]) + len(scope["query_string"]) + sum(len(k) + len(v) for k, v in scope["headers"])
        if size > MAX_HEADER_BYTES:
            return json_response(431, {"error": f"request line and headers over {MAX_HEADER_BYTES} bytes"})
        length = headers.get("content-length", "0")
        if "transfer-encoding" in headers or not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return json_response(413, {"error": f"no route takes a body over {MAX_BODY_BYTES} bytes"})
        host = headers.get("host", "")
        if not self.site.host_ok(host):
            shown = json.dumps(host[:_SHOWN_HOST])
            return json_response(421, {"error": f"Host {shown} is not a name of this server",
                                       "fix": "use a name the server was started with (--server-name)"})  # fmt: skip
        page = metric_route(scope["path"]) == PAGE
        if scope["method"] == "POST":
            origin = headers.get("origin")
            if (origin is None and page) or (
                origin is not None and not self.site.origin_ok(origin, scope["scheme"], host)
            ):
                return json_response(403, {"error": "a POST must come from this server's own pages (Origin)"})
        if scope["path"] in _OPEN or page:
            return None
        scheme, _, supplied = headers.get("authorization", "").partition(" ")
        environments = self.plane.tokens.environments(supplied.strip()) if scheme.lower() == "bearer" else None
        if environments is not None:
            scope[ENVIRONMENTS], scope[WHO] = environments, fingerprint(supplied.strip())
            return None
        return self._wrong_token(peer(scope), given=bool(supplied.strip()))

    def _wrong_token(self, client: str, *, given: bool) -> Response:
        """401, or 429 while ``client`` is past the wrong-token limit; a wrong token (not a missing one) counts."""
        wait = self.plane.throttle.wait_seconds(client)
        if given:
            self.plane.throttle.failed(client)
            audit("api token refused", who=NOBODY, peer=client, throttled=wait > 0)
        if wait > 0:
            seconds = math.ceil(wait)
            return json_response(429, {"error": f"too many wrong tokens from this address: try again in {seconds} s"},
                                 {"Retry-After": str(seconds)})  # fmt: skip
        return json_response(
            401, {"error": "missing or wrong bearer token"}, {"WWW-Authenticate": 'Bearer realm="ikkai"'}
        )


_POLICY_HEADERS = (b"content-security-policy", b"x-frame-options", b"referrer-policy", b"x-content-type-options")


def _policy_headers(policy: str) -> list[tuple[bytes, bytes]]:
    return [(b"content-security-policy", policy.encode()), (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"), (b"x-content-type-options", b"nosniff")]  # fmt: skip


_BUNDLE_PARAMETERS = f"""
parameters:
  - {{name: bundle, in: path, required: true, schema: {{type: string, pattern: "{BUNDLE_NAME.pattern}"}}}}
  - {{name: env, in: path, required: true, schema: {{type: string, pattern: "{ENVIRONMENT_NAME.pattern}"}}}}"""
_BUNDLE_RESPONSES = """
responses:
  "200": {description: "The result, as JSON (as `ikkai bundle ... -o json` prints it)."}
  "401": {description: "No token, or not one of ours."}
  "403": {description: "The token does not cover this environment."}
  "422": {description: "The bundle, its values or Connect said no: {error, kind}."}"""


def _documented(summary: str, flag: str | None = None) -> str:
    """The OpenAPI operation of a bundle route, as Starlette's SchemaGenerator reads it from a docstring."""
    query = "" if flag is None else (
        f"\n  - {{name: {flag}, in: query, required: false, schema: {{type: string, enum: ['true', 'false']}}}}"
    )  # fmt: skip
    return f"---\nsummary: {summary}\nsecurity: [{{bearer: []}}]{_BUNDLE_PARAMETERS}{query}{_BUNDLE_RESPONSES}\n"


def app_for(plane: ControlPlane, *, site: ServeSite | None = None, cookie: str = "ikkai_page") -> ASGIApp:
    """The API and the page for ``site`` (default: loopback names, plain HTTP); ``cookie`` names the page's
    session cookie (``deploy.serve.http`` puts the port in it: one per server)."""
    site = site or ServeSite()

    async def healthz(request: Request) -> Response:
        """---
        summary: Liveness, and the reconcile loop's health; no token needed.
        responses:
          "200": {description: '{"status": "ok"}, or {"status": "degraded", "reason": ...}'}
        """
        return json_response(200, plane.health())

    async def metrics(request: Request) -> Response:
        """---
        summary: Prometheus metrics (any of the tokens).
        security: [{bearer: []}]
        responses:
          "200": {description: Prometheus text exposition format.}
          "401": {description: No token, or not one of ours.}
        """
        return Response(plane.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def openapi(request: Request) -> Response:
        """---
        summary: This document.
        security: [{bearer: []}]
        responses:
          "200": {description: OpenAPI 3 as JSON.}
        """
        return json_response(200, _SCHEMAS.get_schema(routes=starlette.routes))

    async def bundle_verb(request: Request) -> Response:
        bundle, env = request.path_params["bundle"], request.path_params["env"]
        verb = request.url.path.rsplit("/", 1)[1]
        if not (BUNDLE_NAME.match(bundle) and ENVIRONMENT_NAME.match(env)):
            return json_response(404, {"error": f"no route {request.url.path}"})
        if not ServeTokens.covers(request.scope[ENVIRONMENTS], env):
            return json_response(403, {"error": f"this token is not for environment {env}"})
        query = {name: request.query_params.getlist(name) for name in request.query_params}
        try:
            status, data = await run_in_threadpool(plane.run, bundle, env, verb, query)
        except IkkaiError as exc:
            status, data = 422, {"error": str(exc), "kind": type(exc).__name__}
        if request.method == "POST":
            result = "done" if status == 200 else f"failed: {data.get('error', '')}"
            audit(f"api {verb}", who=request.scope[WHO], peer=peer(request.scope), env=env, bundle=bundle,
                  query=request.url.query, result=result)  # fmt: skip
        return json_response(status, data)

    def operation(verb: str, doc: str) -> Any:
        async def endpoint(request: Request) -> Response:
            return await bundle_verb(request)

        endpoint.__doc__ = doc
        endpoint.__name__ = verb
        return endpoint

    async def no_route(request: Request, exc: Exception) -> Response:
        return json_response(404, {"error": f"no route {request.url.path}"})

    async def wrong_method(request: Request, exc: Exception) -> Response:
        verb = request.url.path.rsplit("/", 1)[-1]
        if verb in _METHOD:
            return json_response(405, {"error": f"{verb} needs {_METHOD[verb]}"})
        return json_response(405, {"error": f"{request.method} is not served on {request.url.path}"})

    docs = {
        "plan": _documented("What apply would change (the plan).", "prune"),
        "apply": _documented("Apply the bundle and wait for its connectors and tasks.", "prune"),
        "status": _documented("The connectors' and tasks' states."),
        "restart": _documented("Restart the bundle's connectors and tasks.", "failed"),
    }
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
        Mount(PAGE, page_app(plane, secure_cookie=site.https, cookie=cookie)),
    ]
    routes += [
        Route(f"/bundles/{{bundle}}/{{env}}/{verb}", operation(verb, docs[verb]), methods=[method], name=verb)
        for verb, method in _METHOD.items()
    ]
    starlette = Starlette(routes=routes, exception_handlers={404: no_route, 405: wrong_method})
    return RedactedResponses(Guard(starlette, plane, site))  # every body leaves redacted (deploy.serve.outgoing)


_SCHEMAS = SchemaGenerator(
    {
        "openapi": "3.0.3",
        "info": {"title": "ikkai serve", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
)

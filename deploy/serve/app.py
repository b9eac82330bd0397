"""The routes of ``ikkai serve`` as a Starlette application: bearer token, size limit, request metrics.

What each route does lives in ``deploy.serve.service`` (``ControlPlane``); this module only maps HTTP onto
it. Every route but ``/healthz`` and the page needs ``Authorization: Bearer <token>``, checked before
routing so that a caller without the token learns nothing about which paths exist; a bundle route also
needs a token that covers its environment (``deploy.serve.tokens``), else 403. The operator page is
mounted at ``/ui`` (``deploy.serve.page``): it takes no bearer header but a login that turns the same token
into a signed session cookie, and checks that cookie and a CSRF token itself. No API route takes a
body (the page's small forms do): a request announcing one larger than ``MAX_BODY_BYTES`` (or a
chunked one, whose size is unknown) is refused with 413 before any route runs, and a request line and
headers over ``MAX_HEADER_BYTES`` with 431. Bundle operations call Connect and may take minutes, so
they run on Starlette's thread pool, never on the event loop that serves ``/healthz``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.schemas import SchemaGenerator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from connectors.manifest import BUNDLE_NAME, ENVIRONMENT_NAME
from deploy.serve.metrics import CONTENT_TYPE
from deploy.serve.outgoing import RedactedResponses
from deploy.serve.page import page_app
from deploy.serve.service import ControlPlane, ServeTokens
from ikkai.errors import IkkaiError

MAX_BODY_BYTES = 64 * 1024  # no route reads a body: this only bounds what a client may announce
MAX_HEADER_BYTES = 16 * 1024  # request line and headers together
_METHOD = {"plan": "GET", "status": "GET", "apply": "POST", "restart": "POST"}
_OPEN = ("/healthz",)
PAGE = "/ui"  # the operator page: its own login and session cookie instead of the bearer header
ENVIRONMENTS = "ikkai.environments"  # set in the ASGI scope by Guard: what the caller's token covers


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
    """Counts every response; refuses oversized headers (431) or bodies (413), and a missing or wrong token (401)."""

    def __init__(self, app: ASGIApp, plane: ControlPlane) -> None:
        self.app = app
        self.plane = plane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = metric_route(scope["path"])

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.plane.metrics.count_request(route, message["status"])
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
        if scope["path"] in _OPEN or metric_route(scope["path"]) == PAGE:
            return None
        scheme, _, supplied = headers.get("authorization", "").partition(" ")
        environments = self.plane.tokens.environments(supplied.strip()) if scheme.lower() == "bearer" else None
        if environments is not None:
            scope[ENVIRONMENTS] = environments
            return None
        return json_response(
            401, {"error": "missing or wrong bearer token"}, {"WWW-Authenticate": 'Bearer realm="ikkai"'}
        )


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


def app_for(plane: ControlPlane, *, secure_cookie: bool = False) -> ASGIApp:
    """The API and the page; ``secure_cookie`` (served over HTTPS) marks the page's session cookie Secure."""

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
        Mount(PAGE, page_app(plane, secure_cookie=secure_cookie)),
    ]
    routes += [
        Route(f"/bundles/{{bundle}}/{{env}}/{verb}", operation(verb, docs[verb]), methods=[method], name=verb)
        for verb, method in _METHOD.items()
    ]
    starlette = Starlette(routes=routes, exception_handlers={404: no_route, 405: wrong_method})
    return RedactedResponses(Guard(starlette, plane))  # every body leaves redacted (deploy.serve.outgoing)


_SCHEMAS = SchemaGenerator(
    {
        "openapi": "3.0.3",
        "info": {"title": "ikkai serve", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
)

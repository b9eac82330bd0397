"""The routes of the operator page, mounted by ``deploy.serve.app`` at ``/ui``.

Server-rendered: Jinja2 templates (autoescaped) and one stylesheet, both shipped in this package and served
from it, nothing fetched from elsewhere. ``GET /ui/login`` asks for the same bearer token as the API and
``POST /ui/login`` turns it into a session kept in this process, whose random id is the cookie
(``ikkai_page_<port>``, Path ``/ui``, HttpOnly, SameSite=Strict, Secure over HTTPS or behind ``--tls-proxy``;
``deploy.serve.page.session``); the logout ends it. Every login, failed login, logout and action is a line
of the audit log (``deploy.serve.audit``). Connector names go into the actions' URLs as one quoted path
segment each (the ``segment`` filter), so no name can point a button at another route. Every other page
needs that session (else a redirect to the login) and covers
only the environments the token covers (else 403); every action is a POST that also needs the session's CSRF
token in its form (else 403). ``page_app``'s routes say which each needs, and ``deploy.serve.page.access``
checks it. The views read Connect and Kafka through ``deploy.serve.page.environment_readers`` (one reader of each
kind per environment; the flow view's samples, like the bundles view's rows, are taken on a thread of their own and
waited on at most ``FLOW_WAIT_SECONDS``), on Starlette's thread pool like the API's bundle routes. With
``ControlPlane.health_seconds`` set (as ``ikkai serve`` sets it), a ``deploy.serve.page.health_sampler`` started
with the page samples every environment's health in the background and the health view shows its last sample. The
connectors view reads one table per environment (``deploy.serve.page.connector_table``: one expanded Connect call
per interval for every bundle and viewer, paged, and never waited on longer than its ``WAIT_SECONDS``). The
connectors, flow and health views reload themselves every ``REFRESH_SECONDS``; the flow and latency charts are SVG
``<img>``s.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from deploy import bundle_ops
from deploy.eos_view.event_decisions import EVENTS_WINDOW
from deploy.eos_view.flow import DEAD_LETTERS, STAGES, Sample, rates
from deploy.eos_view.health import LOOKBACK, MAX_PARTITIONS, SAMPLE_SECONDS, STUCK_SECONDS, Health
from deploy.eos_view.latency import BUCKET_SECONDS, BUCKETS
from deploy.eos_view.reconciliation import GRACE_SECONDS, RECEIPTS_WINDOW, REQUESTS_WINDOW
from deploy.serve.audit import NOBODY, audit, fingerprint
from deploy.serve.page import bundle_rows
from deploy.serve.page import session as login
from deploy.serve.page.access import Access, form
from deploy.serve.page.charts import flow_chart, latency_chart
from deploy.serve.page.connector_table import PAGE_SIZE, UNBUNDLED, WAIT_SECONDS, Table, page_of
from deploy.serve.page.environment_readers import FLOW_WAIT_SECONDS, EnvironmentReaders
from deploy.serve.page.health_sampler import HealthSampler
from deploy.serve.page.login_fields import applier, landing
from deploy.serve.page.views import (
    dead_letter_rows,
    environments,
    event_decisions_view,
    health_tables,
    lag_tables,
    latency_buckets,
    latency_rows,
    reconciliation_view,
)
from deploy.serve.service import ControlPlane
from deploy.serve.throttle import peer
from ikkai.errors import IkkaiError
from ikkai.redaction import redact_urls

REFRESH_SECONDS = 5  # the connectors view reloads itself this often
SESSION_COOKIE = "ikkai_page"  # deploy.serve.http adds the port: one cookie per server of a host
SESSION_ID = "ikkai.session_id"  # set in the ASGI scope by SessionCookie: the live session's id, or None
FLASH = "flash"
_PAUSE = {"pause": "pause_connector", "resume": "resume_connector"}


def _one_line(exc: IkkaiError) -> str:
    """The error's first line, redacted here too: as a flash message it leaves inside the session cookie."""
    return redact_urls(str(exc).splitlines()[0])


def segment(name: str) -> str:
    """``name`` as one path segment of a URL: every character but letters, digits and ``-._~`` quoted."""
    return quote(name, safe="")


class SessionCookie:
    """Puts the live session the request's cookie names (``SessionStore``) into ``scope["session"]``, else an
    empty mapping that is kept nowhere; its id into ``scope[SESSION_ID]``."""

    def __init__(self, app: ASGIApp, store: login.SessionStore, cookie: str) -> None:
        self.app, self.store, self.cookie = app, store, cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            sid = HTTPConnection(scope).cookies.get(self.cookie)
            fields = self.store.get(sid)
            scope["session"] = {} if fields is None else fields
            scope[SESSION_ID] = None if fields is None else sid
        await self.app(scope, receive, send)


class Page:
    """The page's endpoints for ``plane``; which access each needs is said once, in ``page_app``'s routes."""

    def __init__(self, plane: ControlPlane, *, cookie: str = SESSION_COOKIE, secure_cookie: bool = False) -> None:
        self.plane = plane
        self.cookie, self.secure_cookie = cookie, secure_cookie
        loader = PackageLoader("deploy.serve.page", "templates")
        templates = Environment(loader=loader, autoescape=select_autoescape(default=True))
        templates.filters["segment"] = segment
        self.templates = Jinja2Templates(env=templates)
        self.sessions = login.SessionStore()
        self.readers = EnvironmentReaders(plane)
        if plane.health_seconds is not None:
            sampler = HealthSampler(self.readers.health, self.sampled_environments, plane.metrics,
                                    plane.health_seconds, plane.stopping)  # fmt: skip
            sampler.start()

    def environments(self) -> dict[str, list[str]]:
        """Environment → its bundles, as the bundles folder holds them now."""
        return environments(self.plane.bundles_dir)

    def sampled_environments(self) -> list[str]:
        """The environments the health sampler reads: those some token covers. One that no token reaches has
        no cluster of this service's to read (the demo's page covers only dev, and an uncovered prod would
        fall back to whatever embedded stack the default home holds)."""
        return [env for env in self.environments() if self.plane.tokens.reach(env)]

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        envs = [e for e in self.environments() if login.covers(request.session, e)]
        context.update(
            environments=envs, csrf=request.session.get(login.CSRF), flash=request.session.pop(FLASH, None),
            refresh_seconds=REFRESH_SECONDS,
        )  # fmt: skip
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    async def login_form(self, request: Request) -> Response:
        return self.render(request, "login.html", next=landing(request.query_params.get("next")))

    async def login_post(self, request: Request) -> Response:
        """A right token is always let in; a wrong one counts against the peer (``deploy.serve.throttle``)."""
        client = peer(request.scope)
        fields = await form(request)
        token = fields.get("token", "").strip()
        going = landing(fields.get("next"))
        covered = self.plane.tokens.environments(token)
        if covered is None:
            wait = self.plane.throttle.wait_seconds(client)
            self.plane.throttle.failed(client)
            audit("login failed", who=NOBODY, peer=client, throttled=wait > 0)
            if wait > 0:
                seconds = math.ceil(wait)
                error = f"too many failed logins from this address: try again in {seconds} s"
                refused = self.render(request, "login.html", status=429, error=error, next=going)
                refused.headers["Retry-After"] = str(seconds)
                return refused
            return self.render(request, "login.html", status=401, error="not a token of this server", next=going)
        self.sessions.end(request.scope.get(SESSION_ID))  # a new id at every login: no fixation
        who = fingerprint(token)
        sid = self.sessions.create(covered, who=who, applier=applier(fields.get("name")))
        audit("login", who=who, peer=client, env=",".join(sorted(covered)))
        done = RedirectResponse(going, status_code=303)
        done.set_cookie(self.cookie, sid, max_age=int(login.MAX_SECONDS), path="/ui", secure=self.secure_cookie,
                        httponly=True, samesite="strict")  # fmt: skip
        return done

    async def logout(self, request: Request) -> Response:
        audit("logout", who=request.session.get(login.WHO, NOBODY), peer=peer(request.scope))
        self.sessions.end(request.scope.get(SESSION_ID))
        done = RedirectResponse("/ui/login", status_code=303)
        done.delete_cookie(self.cookie, path="/ui", secure=self.secure_cookie, httponly=True, samesite="strict")
        return done

    def acted(self, request: Request, what: str, env: str, result: str, **fields: str) -> None:
        """The action's line in the audit log, and its result for the next page (the flash)."""
        audit(what, who=request.session.get(login.WHO, NOBODY), peer=peer(request.scope), env=env, result=result,
              **fields)  # fmt: skip
        request.session[FLASH] = result

    async def home(self, request: Request) -> Response:
        envs = [e for e in self.environments() if login.covers(request.session, e)]
        if not envs:
            return self.render(request, "empty.html")
        return RedirectResponse(f"/ui/env/{envs[0]}/connectors", status_code=303)

    async def bundles_view(self, request: Request) -> Response:
        """The bundles view of the path's environment: rows read in the background (Connect, Kafka), never waited
        on longer than ``bundle_rows.WAIT_SECONDS`` (``deploy.serve.page.bundle_rows``)."""
        env = request.path_params["env"]
        reading = await run_in_threadpool(self.readers.bundles(env).latest, bundle_rows.WAIT_SECONDS)
        rows = reading.value if reading is not None else []
        age = None if reading is None else max(0, round(time.monotonic() - reading.at))
        return self.render(request, "bundles.html", env=env, view="bundles", bundles=rows, reading=reading is None,
                           stale=reading is not None and reading.stale, age=age,
                           wait_seconds=bundle_rows.WAIT_SECONDS)  # fmt: skip

    async def connectors_view(self, request: Request) -> Response:
        """A page of the environment's connectors (``?page=N``, ``?name=`` part of a name, ``?state=``), grouped
        by bundle; never waits on Connect longer than ``WAIT_SECONDS`` (``deploy.serve.page.connector_table``)."""
        env = request.path_params["env"]
        query = request.query_params
        number = int(query["page"]) if query.get("page", "").isdigit() else 1
        name, state = query.get("name", "")[:100], query.get("state", "")[:20]
        table = await run_in_threadpool(self.readers.connectors(env).table)
        if table is None:
            table = Table(0.0, (), {"*": f"Connect did not answer within {WAIT_SECONDS:g} s: reload in a moment"})
        shown = page_of(table, number, PAGE_SIZE, name, state)
        bundles = [
            {"bundle": b, "error": table.errors.get(b) or table.errors.get("*"),
             "connectors": [r.connector for r in shown.rows if r.bundle == b]}
            for b in self.environments()[env]
        ]  # fmt: skip
        unbundled = [r.connector for r in shown.rows if r.bundle == UNBUNDLED]
        if unbundled or table.errors.get(UNBUNDLED):
            bundles.append({"bundle": UNBUNDLED, "error": table.errors.get(UNBUNDLED), "connectors": unbundled})

        def link(to: int) -> str:
            return f"?{urlencode({'page': to, 'name': name, 'state': state})}"

        pager = {"number": shown.number, "pages": shown.pages, "total": shown.total, "all": shown.all_rows,
                 "previous": link(shown.number - 1) if shown.number > 1 else None,
                 "next": link(shown.number + 1) if shown.number < shown.pages else None,
                 "size": PAGE_SIZE, "name": name, "state": state, "stale": table.stale,
                 "unread": "*" in table.errors or UNBUNDLED in table.errors,  # Connect's listing was not read
                 "age": None if not table.at else max(0, round(time.monotonic() - table.at))}  # fmt: skip
        return self.render(request, "connectors.html", env=env, view="connectors", bundles=bundles, pager=pager)

    async def flow_samples(self, env: str) -> tuple[list[Sample] | IkkaiError | None, bool]:
        """The environment's flow samples as the background reading has them (``EnvironmentReaders.flow``), or
        its error; None before the first reading; and whether they are stale (a newer one was not ready)."""
        reading = await run_in_threadpool(self.readers.flow(env).latest, FLOW_WAIT_SECONDS)
        return (None, False) if reading is None else (reading.value, reading.stale)

    async def flow_view(self, request: Request) -> Response:
        env = request.path_params["env"]
        samples, stale = await self.flow_samples(env)
        if isinstance(samples, IkkaiError):
            return self.render(request, "flow.html", env=env, view="flow", error=_one_line(samples))
        if not samples:
            return self.render(request, "flow.html", env=env, view="flow", reading=True,
                               wait_seconds=FLOW_WAIT_SECONDS)  # fmt: skip
        ends = samples[-1].ends
        stages = [
            {"stage": stage, "topic": topic, "end": ends.get(topic), "rate": (rates(samples, topic) or [None])[-1]}
            for stage, topic in STAGES
        ]
        dead = [{"topic": topic, "end": ends.get(topic)} for topic in DEAD_LETTERS]
        return self.render(request, "flow.html", env=env, view="flow", stages=stages, dead=dead, samples=len(samples),
                           stale=stale)  # fmt: skip

    async def flow_svg(self, request: Request) -> Response:
        samples, _ = await self.flow_samples(request.path_params["env"])
        shown = samples if isinstance(samples, list) else []
        return Response(flow_chart(shown), media_type="image/svg+xml", headers={"Cache-Control": "no-store"})

    def health_sample(self, env: str) -> Health:
        """The environment's exactly-once health: the sampler's last sample while it runs, else sampled when due."""
        reader = self.readers.health(env)
        return reader.cached() if self.plane.health_seconds is not None else reader.sampled()

    async def health_view(self, request: Request) -> Response:
        env = request.path_params["env"]
        bounds: dict[str, Any] = {
            "lookback": LOOKBACK, "max_partitions": MAX_PARTITIONS, "stuck_seconds": round(STUCK_SECONDS),
            "grace_seconds": round(GRACE_SECONDS), "requests_window": REQUESTS_WINDOW,
            "receipts_window": RECEIPTS_WINDOW, "events_window": EVENTS_WINDOW,
            "latency_minutes": BUCKETS * BUCKET_SECONDS // 60,
            "sampled_every": self.plane.health_seconds, "due_seconds": SAMPLE_SECONDS,  # None: no background sampler
        }  # fmt: skip
        try:
            health = await run_in_threadpool(self.health_sample, env)
        except IkkaiError as exc:
            return self.render(request, "health.html", env=env, view="health", error=_one_line(exc), **bounds)
        ago = max(0, round(time.time() - health.at))  # a viewer who did not take the sample gets the last one
        return self.render(request, "health.html", env=env, view="health", sampled_ago=ago,
                           queries=health_tables(health), left_out=health.left_out,
                           lags=lag_tables(health), lag=health.lags,
                           dead=dead_letter_rows(health), dead_letters=health.dead_letters,
                           reconciliation=reconciliation_view(health), decided=event_decisions_view(health),
                           latency=latency_rows(health), **bounds)  # fmt: skip

    async def latency_svg(self, request: Request) -> Response:
        try:
            health = await run_in_threadpool(self.health_sample, request.path_params["env"])
            decided, receipted = latency_buckets(health)
            now_ms = int(health.at * 1000)
        except IkkaiError:
            decided, receipted, now_ms = [], [], 0
        chart = latency_chart(decided, receipted, now_ms)
        return Response(chart, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})

    async def bundle_action(self, request: Request) -> Response:
        env, bundle, verb = (request.path_params[k] for k in ("env", "bundle", "verb"))
        if bundle not in self.environments()[env] or verb not in ("apply", "restart"):
            return Response(f"no bundle {bundle} in {env}", status_code=404, media_type="text/plain")
        try:
            who = str(request.session.get(login.APPLIER) or applier(None))
            result = (await run_in_threadpool(lambda: self.plane.run(bundle, env, verb, {}, who=who)))[1]
            done = f"{verb} {bundle}/{env}: done" if verb == "apply" else f"restarted {', '.join(result['restarted'])}"
        except IkkaiError as exc:
            done = f"{verb} {bundle}/{env} failed: {_one_line(exc)}"
        self.readers.bundles(env).expire()  # the bundles view reads what the action changed
        self.acted(request, f"page {verb}", env, done, bundle=bundle)
        return RedirectResponse(f"/ui/env/{env}/connectors", status_code=303)

    async def connector_action(self, request: Request) -> Response:
        env, bundle, name, verb = (request.path_params[k] for k in ("env", "bundle", "connector", "verb"))
        if bundle not in self.environments()[env] or verb not in _PAUSE:
            return Response(f"no bundle {bundle} in {env}", status_code=404, media_type="text/plain")

        def act() -> str:
            request_ = self.plane.request(bundle, env)
            if name not in {c.name for c in bundle_ops.rendered(request_).connectors}:
                return f"{name} is not a connector of {bundle}/{env}"
            getattr(bundle_ops.reconciler(request_).client, _PAUSE[verb])(name)
            return f"{verb} {name}: asked (a reconcile loop applying this bundle puts back its target state)"

        try:
            done = await run_in_threadpool(act)
        except IkkaiError as exc:
            done = f"{verb} {name} failed: {_one_line(exc)}"
        self.acted(request, f"page {verb}", env, done, bundle=bundle, connector=name)
        return RedirectResponse(f"/ui/env/{env}/connectors", status_code=303)


def page_app(plane: ControlPlane, *, secure_cookie: bool = False, cookie: str = SESSION_COOKIE) -> ASGIApp:
    """The page for ``plane``; ``cookie`` names its session cookie, ``secure_cookie`` (browsers see HTTPS) marks
    it Secure."""
    page = Page(plane, cookie=cookie, secure_cookie=secure_cookie)
    access = Access(page.environments)
    seen, acted = access.seen, access.acted
    static = Path(__file__).with_name("static")
    routes = [
        Route("/login", page.login_form, methods=["GET"]),
        Route("/login", page.login_post, methods=["POST"]),
        Route("/logout", access.guarded(page.logout, login=False, csrf=True), methods=["POST"]),
        Route("/", seen(page.home), methods=["GET"]),
        Route("/env/{env}/bundles", seen(page.bundles_view), methods=["GET"]),
        Route("/env/{env}/connectors", seen(page.connectors_view), methods=["GET"]),
        Route("/env/{env}/flow", seen(page.flow_view), methods=["GET"]),
        Route("/env/{env}/flow.svg", seen(page.flow_svg), methods=["GET"]),
        Route("/env/{env}/health", seen(page.health_view), methods=["GET"]),
        Route("/env/{env}/latency.svg", seen(page.latency_svg), methods=["GET"]),
        Route("/env/{env}/bundles/{bundle}/{verb}", acted(page.bundle_action), methods=["POST"]),
        Route(
            "/env/{env}/bundles/{bundle}/connectors/{connector:path}/{verb}",
            acted(page.connector_action),
            methods=["POST"],
        ),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(SessionCookie, store=page.sessions, cookie=cookie)])

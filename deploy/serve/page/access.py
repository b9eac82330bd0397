"""Who may see and do what on the operator page: the access check, written once for every route.

The page's routes are declared in ``deploy.serve.page.app`` with the access each needs, and ``Access.guarded``
wraps them: ``login`` — the session is logged in (else a redirect to the login for a GET, a 403 for a POST) and
the path's ``{env}``, when it has one, is an environment of the bundles that the login's token covers (else 403);
``csrf`` — the form carries the session's CSRF token (else 403). An action needs both, in that order; the logout
only the CSRF token. The rules themselves (the session's fields, the CSRF comparison) are ``session``'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import parse_qs, urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from deploy.serve.page import session as login

Endpoint = Callable[[Request], Awaitable[Response]]
MAX_FORM_FIELDS = 8  # the page's forms have one or two fields


async def form(request: Request) -> dict[str, str]:
    """The fields of the request's urlencoded form, the first value of each."""
    try:
        fields = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # more fields than that: a forged form
        raise HTTPException(400, f"a form of more than {MAX_FORM_FIELDS} fields: the page's have one or two") from None
    return {k: v[0] for k, v in fields.items()}


class Access:
    """The access check of the page over the environments that ``environments()`` lists (environment → bundles)."""

    def __init__(self, environments: Callable[[], Mapping[str, list[str]]]) -> None:
        self.environments = environments

    def refusal(self, request: Request, env: str | None = None) -> Response | None:
        """None when the session may see ``env``; else the redirect to the login (GET) or a 403 (POST)."""
        if not login.logged_in(request.session):
            if request.method == "GET":  # back to this view after the login (login_fields.landing checks it)
                return RedirectResponse(f"/ui/login?{urlencode({'next': request.url.path})}", status_code=303)
            return Response("log in first", status_code=403, media_type="text/plain")
        if env is not None and (env not in self.environments() or not login.covers(request.session, env)):
            return Response(f"no environment {env} for this login", status_code=403, media_type="text/plain")
        return None

    @staticmethod
    async def csrf_refusal(request: Request) -> Response | None:
        """None when the form carries the session's CSRF token; else a 403."""
        if not login.csrf_ok(request.session, (await form(request)).get(login.CSRF_FIELD)):
            return Response("missing or wrong CSRF token: reload the page", status_code=403, media_type="text/plain")
        return None

    def guarded(self, endpoint: Endpoint, *, login: bool = True, csrf: bool = False) -> Endpoint:
        """``endpoint`` behind the check: a logged-in session that covers the path's ``{env}`` (``login``), then
        the session's CSRF token in the form (``csrf``); the first refusal is the response."""

        async def checked(request: Request) -> Response:
            refused = self.refusal(request, request.path_params.get("env")) if login else None
            if refused is None and csrf:
                refused = await self.csrf_refusal(request)
            return refused if refused is not None else await endpoint(request)

        checked.__name__ = endpoint.__name__
        return checked

    def seen(self, endpoint: Endpoint) -> Endpoint:
        """A view: a logged-in session that covers the path's environment."""
        return self.guarded(endpoint)

    def acted(self, endpoint: Endpoint) -> Endpoint:
        """An action: a view's check, then the session's CSRF token in the form."""
        return self.guarded(endpoint, csrf=True)

"""The HTTP server of ``ikkai serve``: uvicorn, with the limits a server facing a network needs.

uvicorn (h11) serves the Starlette app of ``deploy.serve.app``. Its own limits are used as they are:
request line and headers at most ``MAX_HEADER_BYTES`` while they arrive (h11 checks only an incomplete
request; the app answers 431 to a complete one over it, and 413 to an announced body over
``MAX_BODY_BYTES``), an idle keep-alive connection closed after ``KEEP_ALIVE_SECONDS``. uvicorn's
keep-alive timer starts only after a response and is cancelled by every byte received, so a connection
that sends half a request (a slowloris), or its headers and then never its body, would be kept for ever.
``RequestDeadline`` adds two limits:

- **A deadline for the whole request.** From the moment a connection is made, and again after each
  response, the request line, headers *and body* must have arrived within ``REQUEST_SECONDS``, however
  slowly they trickle in, or the connection is closed. Once a request is complete the app's work is not
  timed here (an apply may wait minutes on Connect).
- **A connection budget anonymous clients cannot exhaust.** At most ``MAX_CONNECTIONS`` connections:
  when one more is made, the connection that has waited longest *on its client* (an unfinished request,
  or an idle keep-alive) is closed to make room. A client that sends its request at once, authenticated
  or ``/healthz``, is therefore served however many slow connections others hold; only when every
  connection is busy with a complete request does uvicorn answer 503.

``RequestDeadline`` is a subclass of uvicorn's own h11 protocol (the version is pinned in constraints.txt)
and ``tests/deploy/test_service_slowloris.py`` holds it to its word against the real command.

Over TLS the handshake is bounded by asyncio's ``ssl_handshake_timeout`` (60 s), and the deadline
starts once it is done.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import uvicorn
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from deploy.serve.app import MAX_HEADER_BYTES, app_for
from deploy.serve.service import ControlPlane, ServeTLS
from deploy.serve.site import ServeSite

REQUEST_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5
MAX_CONNECTIONS = 512
_BUSY_SLACK = 16  # uvicorn's own 503 limit: above MAX_CONNECTIONS, so it answers only when all are busy
SHUTDOWN_SECONDS = 5


class RequestDeadline(H11Protocol):
    """uvicorn's h11 protocol: a request must arrive whole in time, and the longest waiting gives way to a new one."""

    _deadline: asyncio.TimerHandle | None = None
    _armed_for: Any = None  # the cycle (request) that was current when the deadline was set
    waiting_since: float | None = None  # since when this connection waits on its client; None while served

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        self._make_room()

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and cycle is not self._armed_for and not cycle.more_body:
            self._disarm()  # the request is complete: the app's answer is not timed here
            self._armed_for = cycle

    def on_response_complete(self) -> None:
        self._arm()  # before the next request may start inside super() (pipelining)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._armed_for = self.cycle
        self.waiting_since = time.monotonic()
        self._deadline = self.loop.call_later(REQUEST_SECONDS, self._expire)

    def _disarm(self) -> None:
        self.waiting_since = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> None:
        """Over ``MAX_CONNECTIONS``: close the connection that has waited longest on its client (never this one)."""
        open_ = [c for c in self.connections if isinstance(c, RequestDeadline) and not c.transport.is_closing()]
        if len(open_) <= MAX_CONNECTIONS:
            return
        waiting = [c for c in open_ if c is not self and c.waiting_since is not None]
        if waiting:
            min(waiting, key=lambda c: c.waiting_since or 0.0)._expire()


class QuietDisconnects:
    """A client gone mid-body (cut off at the request deadline, say) needs no answer and is no error to log."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            return


class ServiceServer:
    """The bound socket and the uvicorn server on it; ``serve_forever`` blocks until ``shutdown``."""

    def __init__(
        self, plane: ControlPlane, host: str, port: int, tls: ServeTLS | None, site: ServeSite | None = None
    ) -> None:
        context = tls.context() if tls else None  # its files are checked here, before the port is bound
        site = site or ServeSite.of(host)
        if context is not None and not site.https:
            site = ServeSite(site.names, True, site.proxies)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=MAX_CONNECTIONS)
        self.server = uvicorn.Server(
            uvicorn.Config(
                QuietDisconnects(app_for(plane, site=site, cookie=f"ikkai_page_{self.port}")),  # a cookie per server
                proxy_headers=bool(site.proxies),  # X-Forwarded-* believed only from the proxy named
                forwarded_allow_ips=list(site.proxies),
                http=RequestDeadline,
                lifespan="off",
                log_config=None,
                access_log=False,  # metrics count requests instead
                server_header=False,
                limit_concurrency=MAX_CONNECTIONS + _BUSY_SLACK,
                timeout_keep_alive=KEEP_ALIVE_SECONDS,
                h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                timeout_graceful_shutdown=SHUTDOWN_SECONDS,
                ssl_context_factory=None if context is None else (lambda config, default: context),
            )
        )

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    def serve_forever(self) -> None:
        self.server.run(sockets=[self.socket])

    def shutdown(self) -> None:
        """Ask ``serve_forever`` (on another thread) to finish; it returns once open requests are answered."""
        self.server.should_exit = True

    def server_close(self) -> None:
        self.socket.close()


def make_server(
    plane: ControlPlane,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: ServeTLS | None = None,
    site: ServeSite | None = None,
) -> ServiceServer:
    """HTTP, or HTTPS with ``tls`` (its files are checked here, before the port is bound); ``site``: the names
    and proxy it answers for (``deploy.serve.site``; default: those of ``host``)."""
    return ServiceServer(plane, host, port, tls, site)

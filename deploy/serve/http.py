"""The HTTP server of ``ikkai serve``: uvicorn, with the limits a server facing a network needs.

uvicorn (h11) serves the Starlette app of ``deploy.serve.app``. Its own limits are used as they are:
at most ``MAX_CONNECTIONS`` connections at once (a request beyond that is answered 503, not queued),
request line and headers at most ``MAX_HEADER_BYTES`` while they arrive (h11 checks only an incomplete
request; the app answers 431 to a complete one over it), an idle keep-alive connection closed after
``KEEP_ALIVE_SECONDS``. One limit uvicorn lacks: its keep-alive timer starts only after a response and
is cancelled by every byte received, so a connection that sends half a request line and waits (a
slowloris) is kept for ever. ``HeaderDeadline`` adds it: from the moment a connection is made, and again
after each response, the request line and headers must be complete within ``HEADER_SECONDS``, however
slowly they trickle in, or the connection is closed. It is a subclass of uvicorn's own h11 protocol
(the version is pinned in constraints.txt) and ``tests/deploy/test_service_slowloris.py`` holds it to
its word against the real command.

Over TLS the handshake is bounded by asyncio's ``ssl_handshake_timeout`` (60 s), and the deadline
starts once it is done.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from deploy.serve.app import MAX_HEADER_BYTES, app_for
from deploy.serve.service import ControlPlane, ServeTLS
from deploy.serve.site import ServeSite

HEADER_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5
MAX_CONNECTIONS = 512
SHUTDOWN_SECONDS = 5


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete in time."""

    _deadline: asyncio.TimerHandle | None = None
    _armed_for: Any = None  # the cycle (request) that was current when the deadline was set

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self._armed_for:
            self._disarm()  # a new request's headers were read: its body and the app's answer are not timed here

    def on_response_complete(self) -> None:
        self._arm()  # before the next request may start inside super() (pipelining)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._armed_for = self.cycle
        self._deadline = self.loop.call_later(HEADER_SECONDS, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


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
                app_for(plane, site=site, cookie=f"ikkai_page_{self.port}"),  # one cookie per server of a host
                proxy_headers=bool(site.proxies),  # X-Forwarded-* believed only from the proxy named
                forwarded_allow_ips=list(site.proxies),
                http=HeaderDeadline,
                lifespan="off",
                log_config=None,
                access_log=False,  # metrics count requests instead
                server_header=False,
                limit_concurrency=MAX_CONNECTIONS,
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

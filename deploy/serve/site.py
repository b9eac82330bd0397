"""Where ``ikkai serve`` is reached: the names clients use, whether browsers see HTTPS, which proxy it believes.

``ServeSite`` is resolved once, at the start, from ``--host``, ``--server-name``, ``--tls-proxy``,
``--forwarded-allow-ips`` and whether the server has its own certificate, and checked on every request
(``deploy.serve.app``):

- **Host.** The request's ``Host`` (its name, without the port) must be one of ``names``, else 421 before
  any route runs: a page of another site whose name a DNS server re-points at this address (DNS
  rebinding) gets nothing, not even ``/healthz``. On a loopback address the names are ``localhost`` and
  the loopback addresses; on a named address, that address; on every interface (``0.0.0.0``, ``::``) no
  default is safe, so ``--server-name`` is required. A proxy in front must pass the client's ``Host``
  (nginx: ``proxy_set_header Host $host``).
- **Origin.** A POST that carries ``Origin`` must come from this very origin (the scheme browsers see,
  the request's ``Host`` with its port): another port of the same machine is another origin. The page's
  forms must carry it (browsers always send it on a POST); the API's clients (curl, scripts) send none.
- **HTTPS.** ``https``: browsers reach the service over HTTPS, its own (``--tls-cert``) or a proxy's
  (``--tls-proxy``, which the service cannot see for itself): the page's cookie is then ``Secure``.
- **Proxy.** uvicorn believes ``X-Forwarded-For``/``X-Forwarded-Proto`` only from ``proxies``
  (``--forwarded-allow-ips``); by default from no one (uvicorn's own default trusts loopback, where every
  local user is).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from ikkai.errors import ConfigError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
EVERY_INTERFACE = ("0.0.0.0", "::", "")  # noqa: S104 - names of the wildcard, not a bind


@dataclass(frozen=True)
class ServeSite:
    names: frozenset[str] = LOOPBACK_NAMES  # lower case, without ports or brackets
    https: bool = False
    proxies: tuple[str, ...] = ()  # addresses (or networks) whose X-Forwarded-* uvicorn believes

    @classmethod
    def of(
        cls, host: str, names: tuple[str, ...] = (), *, https: bool = False, proxies: tuple[str, ...] = ()
    ) -> ServeSite:
        """The site for ``--host``; ``names`` (``--server-name``) replace the defaults the address implies."""
        if names:
            return cls(frozenset(_bare(n) for n in names), https, proxies)
        if host in EVERY_INTERFACE:
            raise ConfigError(
                "serve", f"--host {host or '(every interface)'}",
                "clients' Host header cannot be checked: every interface has no name of its own",
                fix="add --server-name <the name clients use> (repeatable), e.g. --server-name ikkai.example.com",
            )  # fmt: skip
        try:
            loopback = ipaddress.ip_address(_bare(host)).is_loopback
        except ValueError:
            loopback = host == "localhost"
        return cls(LOOPBACK_NAMES | {_bare(host)} if loopback else frozenset({_bare(host)}), https, proxies)

    def host_ok(self, host: str) -> bool:
        """The ``Host`` header names this server (any port: the socket's own port is where it arrived)."""
        return bool(host) and _bare(_without_port(host)) in self.names

    def origin_ok(self, origin: str, scheme: str, host: str) -> bool:
        """``origin`` is the origin of this request: the scheme browsers use and the request's own ``Host``."""
        seen = "https" if self.https else scheme
        return origin.lower() == f"{seen}://{host}".lower()


def _without_port(host: str) -> str:
    return urlsplit(f"//{host}").hostname or "" if host else ""


def _bare(name: str) -> str:
    return name.strip().strip("[]").lower().rstrip(".")

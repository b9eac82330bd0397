"""A tiny OAuth 2.0 identity provider for tests: a fake of the outside world, never shipped.

It serves ``GET /jwks`` (the public keys) and ``POST /token`` (the client-credentials grant: the
client id and secret as HTTP basic auth or form fields) and issues RS256 JWTs for one audience,
signed with a key it is given: the secured stack's ``oauth-signing.pem``, whose public half the
broker's OAUTHBEARER listener reads from ``jwks.json``. Unknown clients get 401, as a real one does.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

TOKEN_SECONDS = 300


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass
class IdentityProvider:
    """The signing key and its key id, whom tokens are for and from (audience, issuer), clients (id → secret)."""

    signing_key: Path
    jwks: Path
    key_id: str
    audience: str
    issuer: str
    clients: Mapping[str, str]
    issued: list[str] = field(default_factory=list)  # the client ids tokens went to, in order

    def token(self, client_id: str) -> str:
        key = serialization.load_pem_private_key(self.signing_key.read_bytes(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey)
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.key_id}
        claims = {"iss": self.issuer, "sub": client_id, "aud": self.audience, "iat": now, "exp": now + TOKEN_SECONDS}
        body = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = key.sign(body.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{body}.{_b64(signature)}"


def _handler(idp: IdentityProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path != "/jwks":
                return self._send(404, {"error": "not_found"})
            self._send(200, json.loads(idp.jwks.read_text()))

        def do_POST(self) -> None:
            if self.path != "/token":
                return self._send(404, {"error": "not_found"})
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
            scheme, _, encoded = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() == "basic":
                client_id, _, secret = base64.b64decode(encoded).decode().partition(":")
            if form.get("grant_type") != "client_credentials":
                return self._send(400, {"error": "unsupported_grant_type"})
            if idp.clients.get(client_id) != secret or not secret:
                return self._send(401, {"error": "invalid_client"})
            idp.issued.append(client_id)
            token = idp.token(client_id)
            self._send(200, {"access_token": token, "token_type": "Bearer", "expires_in": TOKEN_SECONDS})

        def _send(self, status: int, body: dict[str, Any]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@contextmanager
def running(idp: IdentityProvider, port: int = 0, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``idp`` on a thread; yields its base URL (``/token`` and ``/jwks`` under it)."""
    server = ThreadingHTTPServer((host, port), _handler(idp))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="identity-provider", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

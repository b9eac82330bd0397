"""The reference receiver: a small HTTP service standing in for the payments and notification APIs.

It does what a well-behaved idempotent API does: the first request with a given
``Idempotency-Key`` is applied (persisted in SQLite, so a restart remembers it) and answered
``201``; every later request with that key is answered with the *stored* response and
applies nothing. While the first request with a key is still being processed, a concurrent
request with the same key is answered ``409 Conflict`` (the IETF Idempotency-Key draft's "a
request with this key is in progress"). One receiver stands for several APIs, one per first path
segment (``/payments/...``, ``/notifications/...``), behind ONE key space, as an API gateway
keeps it: a key used on one path and repeated on another gets the first path's stored response,
so two side effects that shared a key would show up here as one applied and one replayed.

It can be told to misbehave, from Python (``receiver.faults(...)``) or over HTTP
(``POST /_ikkai/faults`` with the same names as JSON):

* ``unavailable_s``: answer ``503`` to everything for that many seconds from now;
* ``throttle_requests`` + ``retry_after_s``: answer the next N requests ``429`` with ``Retry-After``;
  ``retry_after`` (a string) sends that header value as is instead (an HTTP-date, garbage, 19 digits);
* ``reject_keys`` (+ ``reject_status``, default 400): answer those Idempotency-Keys with a 4xx;
* ``delay_s``: take that long to apply a new key before answering (slow responses; the key is
  "in progress" meanwhile, so a concurrent repeat gets ``409``).

``GET /_ikkai/applied`` and ``GET /_ikkai/deliveries`` show what happened. Loopback only: it
is a test fixture and a demo prop, not a server to expose.

Run it alone: ``python -m demo.receiver --db /tmp/receiver.sqlite --port 8099``.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
CONTROL = "/_ikkai/"


@dataclass(frozen=True)
class Applied:
    """One side effect the receiver performed (exactly one per Idempotency-Key)."""

    seq: int
    api: str  # the first path segment: which API applied it
    idempotency_key: str
    method: str
    path: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Delivery:
    """One HTTP request as received, with the status it was answered with."""

    idempotency_key: str | None
    method: str
    path: str
    status: int
    received_at: float  # time.time() when the request arrived
    attempt: str | None  # the sink's X-Ikkai-Attempt header
    replayed: bool  # answered from the stored response of an earlier request with the same key


@dataclass
class Faults:
    unavailable_until: float = 0.0  # time.monotonic()
    throttle_requests: int = 0
    retry_after_s: int = 1
    retry_after: str | None = None  # the Retry-After header as is; None: retry_after_s
    reject_keys: frozenset[str] = field(default_factory=frozenset)
    reject_status: int = 400
    delay_s: float = 0.0


class ReferenceReceiver:
    def __init__(self, db_path: Path, *, port: int = 0, auth: tuple[str, str] | None = None) -> None:
        self.db_path = db_path
        self.auth = auth  # (header, value) every request must carry, or None
        self._lock = threading.Lock()
        self._faults = Faults()
        self._deliveries: list[Delivery] = []
        self._in_progress: set[str] = set()  # keys whose first request is being applied right now
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS applied ("
            " seq INTEGER PRIMARY KEY AUTOINCREMENT, api TEXT NOT NULL, idempotency_key TEXT NOT NULL,"
            " method TEXT NOT NULL, path TEXT NOT NULL, body BLOB NOT NULL, headers TEXT NOT NULL,"
            " status INTEGER NOT NULL, response BLOB NOT NULL, UNIQUE (idempotency_key))"
        )
        self._server = _QuietServer((HOST, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}"

    def start(self) -> ReferenceReceiver:
        self._thread = threading.Thread(target=self._server.serve_forever, name="reference-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        self._db.close()

    def __enter__(self) -> ReferenceReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults --------------------------------------------------------------------------------

    def faults(
        self,
        *,
        unavailable_s: float | None = None,
        throttle_requests: int | None = None,
        retry_after_s: int | None = None,
        retry_after: str | None = None,
        reject_keys: Iterable[str] | None = None,
        reject_status: int | None = None,
        delay_s: float | None = None,
    ) -> None:
        """Change how the receiver misbehaves from now on; arguments left out keep their setting."""
        with self._lock:
            f = self._faults
            if unavailable_s is not None:
                f.unavailable_until = time.monotonic() + unavailable_s
            if throttle_requests is not None:
                f.throttle_requests = throttle_requests
            if retry_after_s is not None:
                f.retry_after_s = retry_after_s
            if retry_after is not None:
                f.retry_after = retry_after
            if reject_keys is not None:
                f.reject_keys = frozenset(reject_keys)
            if reject_status is not None:
                f.reject_status = reject_status
            if delay_s is not None:
                f.delay_s = delay_s

    def reset_faults(self) -> None:
        with self._lock:
            self._faults = Faults()

    # -- what happened -------------------------------------------------------------------------

    def applied(self) -> list[Applied]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, api, idempotency_key, method, path, body, headers FROM applied ORDER BY seq"
            ).fetchall()
        return [Applied(r[0], r[1], r[2], r[3], r[4], bytes(r[5]), json.loads(r[6])) for r in rows]

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)

    # -- the API -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Answer one API request: (status, headers, body). Called on the server's threads."""
        key = idempotency_key(headers.get("idempotency-key"))
        answer = self._decide(headers, key)
        if answer is None:  # a new key, now in progress: apply it (slowly, if told to)
            assert key is not None
            answer = self._apply(method, path, headers, body, key)
        status, extra, response, replayed = answer
        with self._lock:
            self._deliveries.append(
                Delivery(key, method, path, status, time.time(), headers.get("x-ikkai-attempt"), replayed)
            )
        return status, extra, response

    def _decide(self, headers: dict[str, str], key: str | None) -> tuple[int, dict[str, str], bytes, bool] | None:
        """The answer that needs no new application, or None after marking ``key`` in progress."""
        with self._lock:
            f = self._faults
            if self.auth is not None and headers.get(self.auth[0].lower()) != self.auth[1]:
                return 401, {}, _error("missing or wrong credentials"), False
            if not key:
                return 400, {}, _error("Idempotency-Key header is required"), False
            if time.monotonic() < f.unavailable_until:
                return 503, {}, _error("temporarily unavailable"), False
            if f.throttle_requests > 0:
                f.throttle_requests -= 1
                retry_after = f.retry_after if f.retry_after is not None else str(f.retry_after_s)
                return 429, {"Retry-After": retry_after}, _error("slow down"), False
            if key in f.reject_keys:
                return f.reject_status, {}, _error(f"request {key} is invalid: amount must be positive"), False
            # One key space for every path, as an API gateway keeps it.
            row = self._db.execute("SELECT status, response FROM applied WHERE idempotency_key = ?", (key,)).fetchone()
            if row is not None:
                return int(row[0]), {}, bytes(row[1]), True
            if key in self._in_progress:
                return 409, {}, _error(f"a request with Idempotency-Key {key} is still being processed"), False
            self._in_progress.add(key)
            return None

    def _apply(
        self, method: str, path: str, headers: dict[str, str], body: bytes, key: str
    ) -> tuple[int, dict[str, str], bytes, bool]:
        try:
            with self._lock:
                delay = self._faults.delay_s
            if delay > 0:
                time.sleep(delay)  # a slow API, on purpose: the key stays in progress meanwhile
            api = path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
            response = json.dumps({"applied": True, "idempotency_key": key, "path": path}, sort_keys=True).encode()
            kept = {k: v for k, v in headers.items() if k not in {"host", "content-length", "connection"}}
            with self._lock:
                self._db.execute(
                    "INSERT INTO applied (api, idempotency_key, method, path, body, headers, status, response)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (api, key, method, path, body, json.dumps(kept, sort_keys=True), 201, response),
                )
            return 201, {}, response, False
        finally:
            with self._lock:
                self._in_progress.discard(key)

    def control(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if method == "POST" and path == CONTROL + "faults":
            try:
                self.faults(**json.loads(body or b"{}"))
            except (ValueError, TypeError) as exc:
                return 400, {}, _error(f"bad faults: {exc}")
            return 204, {}, b""
        if method == "POST" and path == CONTROL + "reset":
            self.reset_faults()
            return 204, {}, b""
        if method == "GET" and path == CONTROL + "applied":
            rows = [{**asdict(a), "body": a.body.decode(errors="replace")} for a in self.applied()]
            return 200, {}, json.dumps(rows).encode()
        if method == "GET" and path == CONTROL + "deliveries":
            return 200, {}, json.dumps([asdict(d) for d in self.deliveries()]).encode()
        return 404, {}, _error(f"no control endpoint {method} {path}")


class _QuietServer(ThreadingHTTPServer):
    """A client hanging up mid-request (a killed Connect worker) is normal here, not a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def idempotency_key(value: str | None) -> str | None:
    """The key an ``Idempotency-Key`` header carries: an RFC 8941 string (the IETF draft's form), or a bare token.

    ``"ab\\"c"`` is the key ``ab"c``; an unquoted value is taken as it is, for clients that send a token.
    """
    if value is None or len(value) < 2 or not (value.startswith('"') and value.endswith('"')):
        return value
    return re.sub(r"\\(.)", r"\1", value[1:-1])


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def _handler_for(receiver: ReferenceReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the sink's HTTP client expects
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.path.startswith(CONTROL):
                status, extra, response = receiver.control(self.command, self.path, body)
            else:
                status, extra, response = receiver.handle(self.command, self.path, headers, body)
            self.send_response(status, HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else None)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(response)))
            self.end_headers()
            self.wfile.write(response)

        do_POST = do_PUT = do_PATCH = do_DELETE = do_GET = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The outbox's reference receiver (loopback only).")
    parser.add_argument("--db", type=Path, required=True, help="SQLite file of applied Idempotency-Keys")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    receiver = ReferenceReceiver(args.db, port=args.port)
    print(receiver.url, flush=True)
    try:
        receiver._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        receiver._server.server_close()


if __name__ == "__main__":
    main()

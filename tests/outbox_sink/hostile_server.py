"""A scripted external HTTP server for the outbox sink's hostile tests: raw sockets, loopback, bounded in time.

The test picks the server's behaviour per request path: a request for
``<base>/<behaviour>/<times>/<nonce>[/anything]`` gets ``behaviour`` on its first ``times``
attempts (``always``: on every one) and a normal answer afterwards; ``script_path`` builds such a
path (``hostile_behaviours`` holds the script and what the server records of it). ``nonce`` names
the side effect, so the server can count, per effect, how often it was *applied* — independently
of the Idempotency-Key the sink sends, which is what the hostile matrix checks ("applied at most
once, exactly once for each DELIVERED").

Like a well-behaved idempotent API it applies a request once per Idempotency-Key and answers a
repeat with the stored answer without applying it again; a request without a key is applied every
time (so a sink that dropped or changed the key shows up as a second application). Behaviours
that answer after applying (``stall-body``, ``drip``, ``huge``, ``reset``, ``see-other``) apply
first; the others (``conflict``, ``garbage``, the interim ones, the TLS listener) apply nothing
while they misbehave.

Besides, it answers a request-target longer than ``MAX_TARGET`` with ``414`` (as real servers do),
and records (``escapes``) every request whose path leaves the base once normalised the way Tomcat
does (``;params`` dropped, ``%2e`` decoded, dot segments resolved): a sink must never send one.

``tls_url`` is a second listener that accepts connections, reads the ClientHello and never answers:
a TLS handshake that never completes.

The server runs its own event loop on a thread, never buffers a response it streams, and stops by
itself after ``lifetime_s`` (every stalled answer is released then, at the latest).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final

from tests.outbox_sink.hostile_behaviours import (
    ALWAYS,
    Application,
    Attempt,
    Behaviour,
    idempotency_key,
    normalised,
    parse_script,
)

HOST: Final = "127.0.0.1"
BASE: Final = "/api"
MAX_TARGET: Final = 64 * 1024  # longer request-targets are answered 414, as Tomcat and nginx do
READ_LIMIT: Final = 2 * 1024 * 1024  # what the server reads of one request line or header block
MAX_BODY: Final = 16 * 1024 * 1024
CHUNK: Final = bytes(1024 * 1024)  # the one buffer a huge body is streamed from
HUGE_GARBAGE_BYTES: Final = 390 * 1024  # the JDK quotes a bad status line whole in its exception (issue 44)
DRIP_INTERVAL_S: Final = 0.25
DRIP_BYTES: Final = 4096  # 17 minutes at one byte a quarter second: longer than any deadline
STATUS_TEXT: Final = {
    200: "OK", 201: "Created", 303: "See Other", 404: "Not Found", 409: "Conflict", 411: "Length Required",
    413: "Content Too Large", 414: "URI Too Long",
}  # fmt: skip


@dataclass
class _Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    applications: list[Application] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    escapes: list[str] = field(default_factory=list)
    stored: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # key -> (status, body) of the first answer
    numbers: Counter[str] = field(default_factory=Counter)
    tls_connections: int = 0
    open_stalls: int = 0
    healed: bool = False


class HostileServer:
    """The scripted server (see the module docstring); use as a context manager."""

    def __init__(self, *, huge_bytes: int = 64 * 1024 * 1024, lifetime_s: float = 1800.0) -> None:
        self.huge_bytes = huge_bytes
        self.lifetime_s = lifetime_s
        self._state = _State()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hostile-server", daemon=True)
        self.port = 0
        self.tls_port = 0

    # -- the test's side -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to configure as a target: requests go to ``url + script_path(...)``."""
        return f"http://{HOST}:{self.port}{BASE}"

    @property
    def tls_url(self) -> str:
        """An https base URL whose TLS handshake never completes."""
        return f"https://{HOST}:{self.tls_port}{BASE}"

    def applications(self) -> list[Application]:
        with self._state.lock:
            return list(self._state.applications)

    def attempts(self) -> list[Attempt]:
        with self._state.lock:
            return list(self._state.attempts)

    def escapes(self) -> list[str]:
        """Request-targets that left the base once normalised (each answered 404, nothing applied)."""
        with self._state.lock:
            return list(self._state.escapes)

    @property
    def tls_connections(self) -> int:
        with self._state.lock:
            return self._state.tls_connections

    @property
    def open_stalls(self) -> int:
        """Answers the server is holding right now (stalled, dripping or streaming), their client still there."""
        with self._state.lock:
            return self._state.open_stalls

    def more_targets(self, count: int) -> list[str]:
        """``count`` more listeners on loopback, each a port of its own and served as ``url`` is: their base URLs.

        Distinct host:port, so a client pools one connection per listener (the many-targets deployment).
        """
        return asyncio.run_coroutine_threadsafe(self._listen(count), self._loop).result(120)

    def heal(self) -> None:
        """From now on every attempt gets the normal answer, whatever its path asks for (the target recovered)."""
        with self._state.lock:
            self._state.healed = True

    def __enter__(self) -> HostileServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    # -- the loop's side -----------------------------------------------------------------------

    async def _start(self) -> None:
        self._stopping = asyncio.Event()
        plain = await asyncio.start_server(self._serve, HOST, 0, limit=READ_LIMIT)
        tls = await asyncio.start_server(self._never_handshake, HOST, 0)
        self._servers = [plain, tls]
        self.port = plain.sockets[0].getsockname()[1]
        self.tls_port = tls.sockets[0].getsockname()[1]
        self._loop.call_later(self.lifetime_s, lambda: asyncio.ensure_future(self._shutdown()))

    async def _listen(self, count: int) -> list[str]:
        urls = []
        for _ in range(count):
            server = await asyncio.start_server(self._serve, HOST, 0, limit=READ_LIMIT)
            self._servers.append(server)
            urls.append(f"http://{HOST}:{server.sockets[0].getsockname()[1]}{BASE}")
        return urls

    async def _shutdown(self) -> None:
        assert self._stopping is not None
        self._stopping.set()
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    async def _never_handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._state.lock:
            self._state.tls_connections += 1
        self._writers.add(writer)
        try:
            while await reader.read(65536):  # the ClientHello and whatever follows; never a byte back
                pass
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    request = await self._read_request(reader)
                except _Refused as refused:
                    await self._send(writer, refused.status, b"", close=True)
                    return
                if request is None or not await self._answer(request, reader, writer):
                    return
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError as exc:
            raise _Refused(414) from exc
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, _ = lines[0].split(" ", 2)
        except ValueError:
            return None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        length = headers.get("content-length")
        if length is None:
            if headers.get("transfer-encoding"):
                raise _Refused(411)
            body = b""
        elif not length.isdigit() or int(length) > MAX_BODY:
            raise _Refused(413)
        else:
            body = await reader.readexactly(int(length))
        return _Request(method, target, headers, body)

    async def _answer(self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answers one request; False when the connection is done."""
        nonce, behaviour, times = parse_script(request.target)
        key = idempotency_key(request.headers.get("idempotency-key"))
        state = self._state
        with state.lock:
            state.numbers[nonce] += 1
            number = state.numbers[nonce]
            hostile = not state.healed and (times == ALWAYS or number <= times)
        if len(request.target) > MAX_TARGET:
            self._log(nonce, behaviour, number, key, hostile=False, applied=False, status=414)
            await self._send(writer, 414, b"", close=True)
            return False
        if not normalised(request.target).startswith(BASE + "/"):
            with state.lock:
                state.escapes.append(request.target)
            self._log(nonce, behaviour, number, key, hostile=False, applied=False, status=404)
            await self._send(writer, 404, b"", close=True)
            return False
        misbehaving = hostile and behaviour.misbehaves
        if misbehaving and not behaviour.applies_first:
            self._log(
                nonce, behaviour, number, key, hostile=True, applied=False, status=self._hostile_status(behaviour)
            )
            return await self._misbehave(behaviour, reader, writer)
        status, body, applied = self._apply(nonce, key, request, behaviour)
        if misbehaving:
            self._log(
                nonce, behaviour, number, key, hostile=True, applied=applied, status=self._hostile_status(behaviour)
            )
            return await self._misbehave(behaviour, reader, writer)
        self._log(nonce, behaviour, number, key, hostile=hostile, applied=applied, status=status)
        location = f"{BASE}/effects/{nonce}" if status == 303 else None
        await self._send(writer, status, body, location=location)
        return True

    def _apply(self, nonce: str, key: str | None, request: _Request, behaviour: Behaviour) -> tuple[int, bytes, bool]:
        """Applies the effect unless its key was applied before; the answer (first or stored) and whether it applied."""
        state = self._state
        with state.lock:
            if key is not None and key in state.stored:
                status, body = state.stored[key]
                return status, body, False
            status = {Behaviour.OK_200: 200, Behaviour.SEE_OTHER: 303}.get(behaviour, 201)
            body = json.dumps({"applied": True, "nonce": nonce, "idempotency_key": key}, sort_keys=True).encode()
            state.applications.append(
                Application(
                    nonce,
                    key,
                    request.method,
                    request.target,
                    dict(request.headers),
                    hashlib.sha256(request.body).hexdigest(),
                    time.time(),
                )
            )
            if key is not None:
                state.stored[key] = (status, body)
            return status, body, True

    @staticmethod
    def _hostile_status(behaviour: Behaviour) -> int | None:
        return {
            Behaviour.CONFLICT: 409, Behaviour.STALL_BODY: 201, Behaviour.DRIP: 201, Behaviour.HUGE: 200,
            Behaviour.CONTINUE_STALL: 100, Behaviour.EARLY_HINTS_STALL: 103, Behaviour.RESET: 201,
            Behaviour.NOT_FOUND: 404,
        }.get(behaviour)  # fmt: skip

    async def _misbehave(
        self, behaviour: Behaviour, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if behaviour is Behaviour.CONFLICT:
            await self._send(writer, 409, b'{"error": "a request with this key is in progress"}')
            return True
        if behaviour is Behaviour.GARBAGE:
            writer.write(b"HTTP/1.1 two hundred\x00 \x01\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            return False
        if behaviour is Behaviour.STALL_HEAD:
            await self._hold(reader)
            return False
        if behaviour is Behaviour.HUGE_GARBAGE:
            writer.write(b"HTTP/1.1 " + b"g" * HUGE_GARBAGE_BYTES + b"\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            return False
        if behaviour is Behaviour.NOT_FOUND:
            await self._send(writer, 404, b'{"error": "no such resource"}')
            return True
        if behaviour in (Behaviour.CONTINUE_STALL, Behaviour.EARLY_HINTS_STALL):
            interim = b"100 Continue\r\n\r\n" if behaviour is Behaviour.CONTINUE_STALL else \
                b"103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"  # fmt: skip
            writer.write(b"HTTP/1.1 " + interim)
            await writer.drain()
            await self._hold(reader)
            return False
        size = self.huge_bytes if behaviour is Behaviour.HUGE else DRIP_BYTES if behaviour is Behaviour.DRIP else 64
        status = 200 if behaviour is Behaviour.HUGE else 201
        writer.write(self._head(status, size, "application/octet-stream"))
        await writer.drain()
        if behaviour is Behaviour.STALL_BODY:
            await self._hold(reader)
        elif behaviour is Behaviour.RESET:
            writer.write(b"{")
            await writer.drain()
            sock = writer.get_extra_info("socket")
            if sock is not None:  # linger 0: close sends RST, not FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif behaviour is Behaviour.DRIP:
            await self._stream(writer, reader, size, DRIP_INTERVAL_S, b"x")
        else:
            await self._stream(writer, reader, size, 0.0, CHUNK)
        return False

    async def _hold(self, reader: asyncio.StreamReader) -> None:
        """Sends nothing until the client goes away or the server stops."""
        assert self._stopping is not None
        with self._state.lock:
            self._state.open_stalls += 1
        gone = asyncio.ensure_future(reader.read(1))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({gone, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            stopping.cancel()
            with self._state.lock:
                self._state.open_stalls -= 1

    async def _stream(
        self, writer: asyncio.StreamWriter, reader: asyncio.StreamReader, size: int, interval: float, piece: bytes
    ) -> None:
        """``size`` bytes of ``piece`` repeated, one piece per ``interval``, until sent, the client leaves or stop."""
        assert self._stopping is not None
        with self._state.lock:
            self._state.open_stalls += 1
        try:
            sent = 0
            while sent < size and not self._stopping.is_set() and not reader.at_eof():
                n = min(len(piece), size - sent)
                writer.write(piece[:n] if n < len(piece) else piece)
                await writer.drain()
                sent += n
                if interval:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), interval)
        except (ConnectionError, OSError):
            pass
        finally:
            with self._state.lock:
                self._state.open_stalls -= 1

    @staticmethod
    def _head(status: int, length: int, content_type: str = "application/json", location: str | None = None) -> bytes:
        lines = [f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Status')}", f"Content-Type: {content_type}",
                 f"Content-Length: {length}"]  # fmt: skip
        if location is not None:
            lines.append(f"Location: {location}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        *,
        location: str | None = None,
        close: bool = False,
    ) -> None:
        head = self._head(status, len(body), location=location)
        if close:
            head = head[:-2] + b"Connection: close\r\n\r\n"
        writer.write(head + body)
        await writer.drain()

    def _log(
        self, nonce: str, behaviour: Behaviour, number: int, key: str | None, *, hostile: bool, applied: bool,
        status: int | None,
    ) -> None:  # fmt: skip
        with self._state.lock:
            self._state.attempts.append(
                Attempt(nonce, behaviour.value, number, key, hostile, applied, status, time.time())
            )

"""``ikkai serve`` against a slowloris: hundreds of connections that send half a request and wait.

The real command is started as a user would; each idle half-request must be closed by the server
within its header deadline (plus a margin for a loaded machine), and an ordinary authenticated
request must still be answered while they hang. Today's ``http.server`` kept every one of them,
a thread each, for as long as the client liked.
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from deploy.serve.http import MAX_CONNECTIONS, REQUEST_SECONDS
from stack.ports import free_port
from tests.cli.cli_runner import IKKAI, ROOT

TOKEN = "slowloris-token-Mb7Nc2Xz9Lk4Jh1Gf6Dd3Ss8Aa5Qw0"  # noqa: S105 - a test's token, over 128 bits
HALF_REQUESTS = 300
TRICKLERS = 20
MARGIN_SECONDS = 10.0  # a behavioural bound on a shared machine, not a speed benchmark


@contextmanager
def serving(tmp_path: Path, *flags: str) -> Iterator[int]:
    """``ikkai serve`` with ``flags``, as a user starts it: its port while it runs."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")} | {"IKKAI_SERVE_TOKEN": TOKEN}
    process = subprocess.Popen(
        [str(IKKAI), "serve", "--port", str(port), "--bundles-dir", str(tmp_path), *flags],
        env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # written once the port is bound
        assert line.startswith("serving on http://"), line + process.stderr.read()
        yield port
    finally:
        process.terminate()
        process.wait(30)


def half_request(port: int) -> socket.socket:
    """A connection that sent a request line and one header, never the blank line that ends them."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    sock.setblocking(False)
    return sock


def trickle(sock: socket.socket, byte: bytes) -> bool:
    """Send one more byte of a header that never ends; False once the server has closed the connection."""
    try:
        sock.send(byte)
    except (BrokenPipeError, ConnectionResetError):
        return False
    except BlockingIOError:
        pass
    return not closed_by_peer(sock)


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""  # an answer to half a request (a 408, say) is read and waited past
    except ConnectionResetError:
        return True
    except BlockingIOError:
        return False


def test_idle_half_requests_are_closed_and_a_real_request_is_answered_meanwhile(tmp_path: Path) -> None:
    with serving(tmp_path) as port:
        sockets = [half_request(port) for _ in range(HALF_REQUESTS)]
        opened = time.monotonic()
        try:
            answered = requests.get(
                f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
            )
            assert answered.status_code == 200

            open_ = wait_closed(sockets, opened + REQUEST_SECONDS + MARGIN_SECONDS - time.monotonic())
            assert not open_, (
                f"{len(open_)} of {HALF_REQUESTS} half-requests still open "
                f"{REQUEST_SECONDS + MARGIN_SECONDS:.0f} s after they were sent"
            )
        finally:
            for sock in sockets:
                sock.close()


def test_a_header_trickled_a_byte_at_a_time_is_cut_off_at_the_same_deadline(tmp_path: Path) -> None:
    """Every byte received restarts uvicorn's (and hypercorn's) idle timers: the deadline must be absolute."""
    with serving(tmp_path) as port:
        sockets = [half_request(port) for _ in range(TRICKLERS)]
        deadline = time.monotonic() + REQUEST_SECONDS + MARGIN_SECONDS
        try:
            open_ = set(sockets)
            while open_ and time.monotonic() < deadline:
                open_ = {sock for sock in open_ if trickle(sock, b"a")}
                time.sleep(0.5)
            assert not open_, f"{len(open_)} of {TRICKLERS} trickling clients still connected"
        finally:
            for sock in sockets:
                sock.close()


def slow_body(port: int) -> socket.socket:
    """A login whose headers arrive at once and whose announced body never does (the headers' deadline passed)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: 100\r\n\r\ntoken="
    )
    sock.setblocking(False)
    return sock


def wait_closed(sockets: list[socket.socket], seconds: float) -> set[socket.socket]:
    """The sockets the server has not closed within ``seconds``."""
    open_ = set(sockets)
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ)
        while open_ and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if closed_by_peer(sock):
                    selector.unregister(sock)
                    open_.discard(sock)
    return open_


def test_a_body_that_never_arrives_is_cut_off_at_the_request_deadline(tmp_path: Path) -> None:
    """Headers complete, body announced, never sent: the deadline covers the whole request, not the headers only."""
    with serving(tmp_path) as port:
        sockets = [slow_body(port) for _ in range(TRICKLERS)]
        try:
            left = wait_closed(sockets, REQUEST_SECONDS + MARGIN_SECONDS)
            assert not left, f"{len(left)} of {TRICKLERS} bodies that never came still held"
        finally:
            for sock in sockets:
                sock.close()


def test_anonymous_clients_past_the_connection_limit_do_not_refuse_healthz_or_an_authenticated_request(
    tmp_path: Path,
) -> None:
    """More slow bodies and half-requests than the server takes connections: a new connection closes the one
    that has waited longest on its client, so /healthz and an authenticated /metrics are still answered."""
    with serving(tmp_path) as port:
        sockets = [slow_body(port) for _ in range(10)] + [half_request(port) for _ in range(MAX_CONNECTIONS + 10)]
        try:
            for _ in range(3):
                health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                assert health.status_code == 200 and health.json()["status"] == "ok"
                metrics = requests.get(
                    f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
                )
                assert metrics.status_code == 200
        finally:
            for sock in sockets:
                sock.close()

"""Reaching Connect: an unreachable worker is one error at once (no minute of retries), naming the URL,
the cluster and what to check; a worker that answered before and then drops is retried. Both through
the client and through the CLI, in text and as a JSON error object."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from deploy.connect_rest import ConnectClient, ConnectRestError, ConnectUnreachable
from stack.ports import free_port
from tests.cli.cli_runner import run_ikkai


@pytest.fixture
def refused_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A port whose listen queue is full: the kernel drops new SYNs, so connecting never completes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):  # the handshake completes in the background
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for s in (*fillers, server):
            s.close()


def test_a_refused_connection_is_one_error_at_once_naming_url_and_cluster(refused_url: str) -> None:
    client = ConnectClient(refused_url, cluster="env dev, from --connect-url", retry_deadline=60)
    with pytest.raises(ConnectUnreachable) as caught:
        client.connectors()
    error = caught.value
    assert client.calls == [("GET", "/connectors")]  # asked once, not retried for the retry deadline
    assert (error.reason, error.url, error.status) == ("connection refused", refused_url, None)
    assert str(error).startswith(
        f"Kafka Connect at {refused_url} (env dev, from --connect-url) is unreachable: connection refused"
    )
    assert error.fix is not None and f"curl {refused_url}/" in error.fix and "--connect-url" in error.fix
    assert isinstance(error, ConnectRestError)  # callers that handle Connect errors keep handling it


def test_no_answer_to_connect_fails_after_the_connect_timeout_not_the_read_timeout(silent_url: str) -> None:
    client = ConnectClient(silent_url, connect_timeout=0.2, read_timeout=30, retry_deadline=60)
    with pytest.raises(ConnectUnreachable) as caught:
        client.connector_plugins()
    assert caught.value.reason == "connect timeout" and caught.value.timeout == 0.2
    assert "no answer within 0.2s" in str(caught.value)
    assert len(client.calls) == 1


def test_a_first_request_that_gets_no_answer_fails_after_the_read_timeout_without_retries() -> None:
    server = socket.socket()  # the kernel completes the handshake; nobody ever reads or answers
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        client = ConnectClient(f"http://127.0.0.1:{server.getsockname()[1]}", read_timeout=0.3, retry_deadline=60)
        with pytest.raises(ConnectRestError) as caught:
            client.connectors()
    finally:
        server.close()
    assert not isinstance(caught.value, ConnectUnreachable)
    assert caught.value.connect_message == "no answer within 0.3s" and len(client.calls) == 1


class _Connect(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_a_worker_that_answered_and_then_went_away_is_retried_as_a_restart() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Connect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = ConnectClient(f"http://127.0.0.1:{server.server_address[1]}", retry_deadline=3)
    assert client.connectors() == [] and client.reached
    server.shutdown()
    server.server_close()
    with pytest.raises(ConnectRestError) as caught:
        client.connectors()
    assert not isinstance(caught.value, ConnectUnreachable)
    assert len(client.calls) > 2  # the first answer, then at least two tries of the second request


def test_the_cli_says_it_in_one_line_on_stderr(refused_url: str) -> None:
    result = run_ikkai("bundle", "plan", "payments-ingest", "--connect-url", refused_url)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"ikkai: error: Kafka Connect at {refused_url} (env dev, from --connect-url)")
    assert "connection refused" in lines[0] and "curl" in lines[0]


def test_with_o_json_the_error_is_one_json_object_on_stderr(refused_url: str) -> None:
    result = run_ikkai("connect", "list", "--connect-url", refused_url, "-o", "json")
    assert result.returncode == 1 and result.stdout == ""
    error = json.loads(result.stderr)
    assert error["error"] == "ConnectUnreachable"
    assert error["message"].startswith(f"Kafka Connect at {refused_url}")
    assert error["fields"]["url"] == refused_url and error["fields"]["reason"] == "connection refused"
    assert error["fields"]["cluster"] == "env dev, from --connect-url"
    assert "curl" in error["fix"]


def test_the_clusters_file_sets_the_connect_timeout_and_names_the_environment(tmp_path: Path, silent_url: str) -> None:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({"staging": {"connect_url": silent_url, "connect_timeout_seconds": 0.25}}))
    result = run_ikkai("connect", "list", "--env", "staging", "--clusters", str(clusters), "-o", "json")
    assert result.returncode == 1
    error = json.loads(result.stderr)
    assert error["fields"]["timeout"] == 0.25 and error["fields"]["reason"] == "connect timeout"
    assert error["fields"]["cluster"] == f"env staging, from {clusters}"


Answer = tuple[int, str, bytes]  # status, content type, body
JSON = "application/json"


@contextlib.contextmanager
def fake_worker(answers: dict[str, Answer]) -> Iterator[str]:
    """A worker answering each method (GET, PUT) as ``answers`` says, every time; yields its URL."""

    class Worker(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(*answers["GET"])

        def do_PUT(self) -> None:
            self._answer(*answers["PUT"])

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Worker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_validate_5xx_is_raised_at_once_while_other_5xx_are_retried() -> None:
    # The plugin fails on the config (a config provider that cannot read its file): 500, every time, in
    # milliseconds; every other request 503 (a worker starting: transient).
    failing = (500, JSON, b'{"error_code":500,"message":"ConfigException: Could not read properties from file"}')
    with fake_worker({"PUT": failing, "GET": (503, JSON, b'{"error_code":503,"message":"starting"}')}) as url:
        client = ConnectClient(url, retry_deadline=2)
        with pytest.raises(ConnectRestError) as caught:
            client.validate_config("io.debezium.connector.postgresql.PostgresConnector", {"a": "b"})
        assert caught.value.status == 500 and "Could not read properties" in caught.value.connect_message
        assert len(client.calls) == 1  # shown, not retried for the retry deadline
        with pytest.raises(ConnectRestError) as again:
            client.connectors()
        assert again.value.status == 503 and len(client.calls) > 2  # a 503 elsewhere is still retried


def test_a_web_page_instead_of_the_rest_api_is_said_in_words_not_shown_raw() -> None:
    # The worker's web server is up and its REST resources not yet: Jetty's HTML 404 page.
    page = b"<html><head><title>Error 404 Not Found</title></head><body><h2>HTTP ERROR 404</h2></body></html>"
    restarting = {"GET": (404, "text/html;charset=iso-8859-1", page)}
    with fake_worker(restarting) as url, pytest.raises(ConnectRestError) as caught:
        ConnectClient(url).connector_status("a")
    assert "<html" not in str(caught.value)
    assert "starting or restarting" in str(caught.value) and "404 Not Found" in str(caught.value)

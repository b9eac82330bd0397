"""``ikkai serve``'s real server on a free loopback port, for the tests of its routes, tokens and loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from deploy.serve.http import make_server
from deploy.serve.service import ControlPlane


def serve(plane: ControlPlane) -> Iterator[str]:
    """Yield the server's base URL while it runs; shut it down and close its socket afterwards."""
    server = make_server(plane)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        thread.join(30)
        server.server_close()

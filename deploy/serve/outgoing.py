"""Every body ``ikkai serve`` sends passes the one redaction (``ikkai.redaction``) on its way out.

An error from Connect or Kafka reaches a caller by many routes: the API's 422, ``/healthz``'s degraded
reason, the page's views and flash messages. Rather than trust each of them to redact, the outermost ASGI
layer does it once for every response whose body is text (JSON, HTML, plain text, SVG): the body is
collected, its URL credentials replaced, and its ``Content-Length`` set again. A JSON body is decoded and
each string in it redacted (never the serialised text, whose quotes and escapes a URL must not swallow);
HTML gets the escaped marker (``&lt;redacted&gt;``), so a browser shows ``<redacted>``. Other bodies (the
stylesheet) pass as they are, unbuffered. Bodies are small (no route streams one), so buffering is cheap.
"""

from __future__ import annotations

import html
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ikkai.redaction import REDACTED, redact_data, redact_urls

_TEXT_TYPES = ("application/json", "text/html", "text/plain", "image/svg+xml")


def redacted_body(content_type: str, body: bytes) -> bytes:
    """``body`` as it may leave: URL credentials replaced (see the module docstring). Pure."""
    text = body.decode("utf-8", "replace")
    marker = html.escape(REDACTED) if content_type.startswith(("text/html", "image/svg+xml")) else REDACTED
    shown = redact_urls(text, marker)
    if shown == text:
        return body
    if content_type.startswith("application/json"):
        try:
            return json.dumps(redact_data(json.loads(text)), sort_keys=True).encode()
        except ValueError:
            pass  # not JSON after all: redacted as text
    return shown.encode()


class RedactedResponses:
    """ASGI middleware: text bodies redacted before they are sent (``redacted_body``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "HEAD":  # a HEAD answer has no body to redact
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        content_type = ""
        chunks: list[bytes] = []

        async def redacting(message: Message) -> None:
            nonlocal start, content_type
            if message["type"] == "http.response.start":
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
                content_type = headers.get("content-type", "").lower()
                if not content_type.startswith(_TEXT_TYPES):
                    await send(message)
                    return
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = redacted_body(content_type, b"".join(chunks))
            kept = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*kept, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, redacting)

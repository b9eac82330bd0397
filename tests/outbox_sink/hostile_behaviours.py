"""What the hostile server does with a request, and what it records: its script, read from the request path.

The test picks the server's behaviour per request path (``Behaviour``; ``script_path`` builds the
path, ``parse_script`` reads it back): ``<base>/<behaviour>/<times>/<nonce>[/anything]`` gets
``behaviour`` on its first ``times`` attempts (``ALWAYS``: on every one). The server records each
request it read (``Attempt``) and each side effect it applied (``Application``), and reads the
request-target as Tomcat would (``normalised``) and the Idempotency-Key as the sink sends it
(``idempotency_key``). The server that plays the script is ``hostile_server.HostileServer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

ALWAYS: Final = 0  # ``times`` meaning every attempt


class Behaviour(Enum):
    """What the server does with an attempt; the value is the path segment that asks for it."""

    OK = "ok"  # applies, 201
    OK_200 = "ok-200"  # applies, 200
    CONFLICT = "conflict"  # 409 "key in progress" without applying while hostile, then applies, 201
    SEE_OTHER = "see-other"  # applies, 303 See Other with a Location: the normal answer of an applied POST
    STALL_BODY = "stall-body"  # applies; status line and headers, then not one byte of the body
    STALL_HEAD = "stall-head"  # applies; then not one byte, not even the status line
    DRIP = "drip"  # applies; the body one byte every DRIP_INTERVAL_S
    HUGE = "huge"  # applies; 200 with a body of ``huge_bytes``, streamed as fast as the client reads
    CONTINUE_STALL = "continue-stall"  # 100 Continue, then nothing; applies nothing
    EARLY_HINTS_STALL = "early-hints-stall"  # 103 Early Hints, then nothing; applies nothing
    RESET = "reset"  # applies; headers and one byte of the body, then a TCP reset
    GARBAGE = "garbage"  # a status line that is no status line, then close; applies nothing
    HUGE_GARBAGE = "huge-garbage"  # a 390 KB status line that is no status line, then close; applies nothing
    NOT_FOUND = "not-found"  # 404 with a body, applies nothing: a final rejection

    @property
    def misbehaves(self) -> bool:
        """Whether a hostile attempt gets something else than the normal answer (``ok``, ``see-other`` do not)."""
        return self not in {Behaviour.OK, Behaviour.OK_200, Behaviour.SEE_OTHER}

    @property
    def applies_first(self) -> bool:
        """Whether the effect is applied before the misbehaving answer is sent."""
        return self not in {
            Behaviour.CONFLICT,
            Behaviour.CONTINUE_STALL,
            Behaviour.EARLY_HINTS_STALL,
            Behaviour.GARBAGE,
            Behaviour.HUGE_GARBAGE,
            Behaviour.NOT_FOUND,
        }


def script_path(behaviour: Behaviour, nonce: str, *, times: int = 1, tail: str = "") -> str:
    """The path (relative to the target's base URL) that asks for ``behaviour`` on the first ``times`` attempts."""
    return f"/{behaviour.value}/{'always' if times == ALWAYS else times}/{nonce}{tail}"


def parse_script(target: str) -> tuple[str, Behaviour, int]:
    """(nonce, behaviour, times) of a request-target under ``BASE``; unknown scripts are ``ok``."""
    parts = target.split("?", 1)[0].split("/")  # "", "api", behaviour, times, nonce, ...
    nonce = parts[4] if len(parts) > 4 else target
    try:
        behaviour = Behaviour(parts[2])
    except (IndexError, ValueError):
        return nonce, Behaviour.OK, 1
    times = ALWAYS if parts[3] == "always" else int(parts[3]) if parts[3].isdigit() else 1
    return nonce, behaviour, times


@dataclass(frozen=True)
class Application:
    """One side effect the server performed."""

    nonce: str
    idempotency_key: str | None
    method: str
    target: str
    headers: dict[str, str]
    body_sha256: str
    at: float


@dataclass(frozen=True)
class Attempt:
    """One request the server read, and what it did with it."""

    nonce: str
    behaviour: str
    number: int  # of this nonce, from 1
    idempotency_key: str | None
    hostile: bool
    applied: bool
    status: int | None  # the status line sent, None when none was (garbage, a stall before any)
    at: float


def normalised(target: str) -> str:
    """The path of ``target`` as Tomcat resolves it: ``;params`` dropped per segment, ``%2e`` decoded, dot segments."""
    path = target.split("?", 1)[0]
    out: list[str] = []
    for raw in path.split("/")[1:]:
        segment = raw.split(";", 1)[0].replace("%2e", ".").replace("%2E", ".")
        if segment == ".":
            continue
        if segment == "..":
            if out:
                out.pop()
            continue
        out.append(segment)
    return "/" + "/".join(out)


def idempotency_key(value: str | None) -> str | None:
    """The key an Idempotency-Key header carries: a bare token, or a structured-field string (RFC 8941) unquoted."""
    if value is not None and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value

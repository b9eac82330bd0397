"""What a batch of the hostile matrix holds: the records to write (``Spec``), made into bytes (``Written``).

``materialise`` makes a spec a record with a unique effect: an outbox request encoded as the
shipped codec encodes it, with the Idempotency-Key the sink must send (``idempotency_key``, v2),
or the request's encoding broken field by field (``corrupt_encoding``), or raw bytes. ``Written``
knows the outcome the rules give a well-formed request whose only hostility is the server's.
The matrix and its limits rows are ``test_hostile_matrix.py`` and ``test_hostile_limits.py``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ikkai.contract.codec import default_codec
from ikkai.contract.outbox import REQUEST_SCHEMA
from tests.outbox_sink.hostile_behaviours import ALWAYS, Behaviour, script_path

HOSTILE, TLS, DNS = "hostile-api", "tls-api", "dns-api"
# Only the body misbehaves, after a 2xx status line and headers: the effect was applied.
BODY_ONLY = frozenset({Behaviour.STALL_BODY, Behaviour.DRIP, Behaviour.HUGE})
V2_HEADER_LEN = 10


# -- what a batch holds ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One record to write, before it has its nonce: the test makes each effect unique at write time.

    ``kind`` "request" is an outbox request whose fields are the defaults below unless a hostile
    value replaces them; "corrupt" is the request's encoding under its real fingerprint, broken by
    ``corruption``; "raw" is ``raw`` as it is (None: a tombstone).
    """

    kind: str = "request"
    partition: int = 0
    behaviour: Behaviour = Behaviour.OK
    times: int = 1
    target: str = HOSTILE
    hostile: tuple[tuple[str, Any], ...] = ()  # (field, value) pairs replacing the well-formed ones
    path_tail: str = ""  # appended to the scripted path
    path: str | None = None  # replaces the scripted path altogether
    corruption: tuple[str, str, int] | None = None  # (how, field, claim)
    raw: bytes | None = None
    body: bytes = b'{"amount": 1}'
    path_bytes: int = 0  # pads the scripted path with 'x' to this many bytes (0: no padding)
    effect_of_previous: bool = False  # same decision as the record before it, explicit effect = its target + path
    expect_class: str | None = None  # the record must be DEAD_LETTERED with this ikkai.dlq.error_class
    expect_reason: str | None = None  # ... and a reason that says this

    @property
    def well_formed(self) -> bool:
        """Only the server may misbehave: every field is one the sink can carry."""
        return (
            self.kind == "request"
            and not self.hostile
            and not self.path_tail
            and self.path is None
            and not self.path_bytes
        )

    def describe(self) -> str:
        def short(v: Any) -> str:
            text = repr(v)
            return text if len(text) <= 60 else f"{text[:40]}…({len(text)} chars)"

        if self.kind == "raw":
            return f"raw {short(self.raw)} on p{self.partition}"
        if self.kind == "corrupt":
            return f"corrupt body {self.corruption} on p{self.partition}"
        fields = ", ".join(f"{k}={short(v)}" for k, v in self.hostile)
        where = self.target if self.target != HOSTILE else f"{self.behaviour.value}×{self.times or 'always'}"
        tail = f" path{'=' + short(self.path) if self.path is not None else ' +' + short(self.path_tail)}" if (
            self.path is not None or self.path_tail) else ""  # fmt: skip
        return f"request to {where} on p{self.partition}{tail}{' with ' + fields if fields else ''}"


@dataclass
class Written:
    """A spec made into bytes, with where it landed."""

    spec: Spec
    nonce: str
    value: bytes | None
    fields: dict[str, Any] | None  # the request's fields, when it is one
    idempotency_key: str | None
    offset: int = -1

    @property
    def decodable(self) -> bool:
        return self.fields is not None

    def expected_outcome(self) -> str | None:
        """The outcome the rules give a well-formed request, or None where the matrix predicts none."""
        spec = self.spec
        if not spec.well_formed:
            return None
        if spec.target in (TLS, DNS) or spec.behaviour is Behaviour.NOT_FOUND:
            return "DEAD_LETTERED"
        if spec.behaviour in BODY_ONLY:
            return "DELIVERED"  # the status came: applied, whatever the body did next (issue 44, case 5)
        if spec.behaviour is Behaviour.RESET:
            return None  # the reset may overtake the headers: then no status came, and it is a connection error
        if not spec.behaviour.misbehaves or spec.times != ALWAYS:
            return "DELIVERED"
        return "DEAD_LETTERED"


def idempotency_key(decision_id: str, effect: str | None, target: str, path: str) -> str:
    """The key the shipped bundle's sink must send: v2, as tests/outbox_sink/idempotency_key_vectors.json derives it."""

    def part(text: str) -> bytes:
        data = text.encode()
        return f"{len(data)}:".encode() + data

    tagged = ["e", effect] if effect else ["d", target, path]
    return hashlib.sha256(b"".join(part(p) for p in ["v2", decision_id, *tagged])).hexdigest()


def materialise(spec: Spec, nonce: str, previous: Written | None = None) -> Written:
    if spec.kind == "raw":
        return Written(spec, nonce, spec.raw, None, None)
    path = script_path(spec.behaviour, nonce, times=spec.times) + spec.path_tail
    path += "x" * max(0, spec.path_bytes - len(path))
    fields: dict[str, Any] = {
        "decision_id": f"d-{nonce}", "key": f"k-{nonce}", "target": spec.target,
        "path": spec.path if spec.path is not None else path,
        "method": None, "content_type": "application/json", "body": spec.body, "headers": {},
        "created_at": 1_700_000_000_000, "model_version": "fraud@hostile", "effect": None,
    }  # fmt: skip
    for name, value in spec.hostile:
        if name in ("decision_id", "key"):
            fields[name] = f"{value}-{nonce}"  # still one effect per record
        elif name == "header_value":
            fields["headers"] = {"X-Note": value}
        elif name == "header_name":
            fields["headers"] = {value: "v"}
        elif name != "traceparent":
            fields[name] = value
    if spec.effect_of_previous:
        assert previous is not None and previous.fields is not None
        fields["decision_id"] = previous.fields["decision_id"]
        fields["effect"] = previous.fields["target"] + previous.fields["path"]  # v1 gave both one key
    if spec.kind == "corrupt":
        assert spec.corruption is not None
        return Written(spec, nonce, corrupt_encoding(fields, spec.corruption), None, None)
    value = default_codec().encode(REQUEST_SCHEMA, fields)
    key = idempotency_key(fields["decision_id"], fields["effect"], fields["target"], fields["path"])
    return Written(spec, nonce, value, fields, key)


# -- values under the request's fingerprint with a corrupt body ------------------------------------


def _long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    z &= (1 << 64) - 1
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def corrupt_encoding(fields: dict[str, Any], corruption: tuple[str, str, int]) -> bytes:
    """The request's single-object encoding (schema v2, field by field) with one part broken, as no decoder can read.

    ``("length", field, claim)``: the string or bytes ``field`` claims ``claim`` bytes, more than there are
    (or a negative count); ``("union", field, index)``: the union ``field`` names a branch it has not;
    ``("map", "headers", count)``: the headers map claims ``count`` entries; ``("cut", "", n)``: the
    encoding loses its last ``n`` bytes.
    """
    how, broken, claim = corruption
    out = bytearray(default_codec().encode(REQUEST_SCHEMA, fields)[:10])  # marker and the real fingerprint

    def text(name: str, data: bytes) -> None:
        out.extend(_long(claim if (how, broken) == ("length", name) else len(data)))
        out.extend(data)

    def union(name: str, value: str | None) -> None:
        index = claim if (how, broken) == ("union", name) else 0 if value is None else 1
        out.extend(_long(index))
        if value is not None:
            text(name, value.encode())

    for name in ("decision_id", "key", "target", "path"):
        text(name, fields[name].encode())
    union("method", fields["method"])
    text("content_type", fields["content_type"].encode())
    text("body", fields["body"])
    headers = fields["headers"]
    if headers:
        out.extend(_long(claim if how == "map" else len(headers)))
        for k, v in headers.items():
            text("header_name", k.encode())
            text("header_value", v.encode())
    out.extend(_long(0))
    out.extend(_long(fields["created_at"]))
    union("model_version", fields["model_version"])
    union("effect", fields["effect"])
    return bytes(out[:-claim]) if how == "cut" else bytes(out)

"""The outbox contract: what a side-effect request and its receipt are, and how decision ids and keys are made.

Requests go to ``outbox.requests`` keyed by their business key, receipts come back on
``outbox.receipts`` keyed by ``decision_id``; both are Avro single-object encoded with the
schemas in ``schemas/outbox_request`` and ``schemas/outbox_receipt`` (ikkai.contract.codec).
Every writer of requests builds them here, so each is checked against what the sink can carry
before it is written: the services' emitter (``outbox_sink``) and the infer job
(``spark_jobs.infer.fraud_decisions``). Pure: no Kafka, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote

from ikkai.contract import ids
from ikkai.contract.ids import KEY_VERSION, KEY_VERSIONS, KeyVersion
from ikkai.contract.masking import masked_prefix
from ikkai.errors import IkkaiError

REQUEST_SCHEMA = "outbox_request"
RECEIPT_SCHEMA = "outbox_receipt"

# Headers the sink sets itself; a request that carries one is dead-lettered (outbox_sink/connector Targets.java).
RESERVED_HEADERS = frozenset({
    "idempotency-key", "authorization", "content-type", "content-length", "host", "connection",
    "expect", "upgrade", "transfer-encoding", "te", "trailer", "proxy-authorization", "cookie",
})  # fmt: skip
METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# What the HTTP layer carries (docs/outbox.md, "What a request may carry"), in UTF-8 bytes. decision_id,
# effect, model_version and content_type become header values of every attempt (X-Ikkai-*), the path
# becomes the URL: a value the JDK's HTTP client refuses would reach the sink only to be dead-lettered.
MAX_ID_BYTES = 256  # decision_id, key, target, effect, model_version, content_type
MAX_PATH_BYTES = 2048
MAX_HEADERS = 64
MAX_HEADER_NAME_BYTES = 256
MAX_HEADER_VALUE_BYTES = 8 * 1024
# Kafka headers of a request record the sink copies onto the HTTP request (HttpRequests.TRACE_HEADERS).
TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token, as the sink's Targets.HEADER_NAME
HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")  # visible US-ASCII, space, tab: no control, no character above 0x7E
ID = re.compile(r"[\x21-\x7e]+")  # visible US-ASCII: ids and names travel as header values, unquoted
KEY = re.compile(r"[^\x00-\x1f\x7f-\x9f]+")  # the Kafka key is no header: any character but a control one
PATH = re.compile(r"[\x21-\x7e]+")  # the sink refuses the rest too ('\\' and '#' below): percent-encode them

Outcome = Literal["DELIVERED", "DEAD_LETTERED"]
EffectKind = Literal["EXPLICIT", "DEFAULT"]  # the request named its effect, or it is target + path


class OutboxError(IkkaiError):
    """Base class of the outbox's errors (the emitter's and the receipt reader's are in ``outbox_sink.errors``)."""


class OutboxRequestError(OutboxError):
    """An outbox request breaks the contract (schemas/outbox_request) before it is even sent."""

    def __init__(self, decision_id: str, field: str, problem: str, fix: str | None = None) -> None:
        shown = decision_id if decision_id.isascii() and decision_id.isprintable() else ascii(decision_id)
        shown = shown if len(shown) <= 80 else shown[:64] + "..."
        super().__init__(f"outbox request {shown or '?'}: {field}: {problem}", fix=fix)
        self.decision_id = decision_id
        self.field = field
        self.problem = problem


def value_problem(value: str, *, max_bytes: int, allowed: re.Pattern[str], what: str) -> str | None:
    """Why ``value`` cannot travel as ``what`` over HTTP (too long, or a character outside ``allowed``), or None.

    ``allowed`` matches one character, or a run of them (``[class]+``): a value it matches whole passes in one
    regex pass; the search character by character runs only to name the first one it refuses.
    """
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return f"is {size} bytes; {what} takes at most {max_bytes}"
    if allowed.fullmatch(value) is not None:  # the patterns are [class]+ or [class]*: one linear pass for the whole
        return None
    bad = next((c for c in value if not allowed.fullmatch(c)), None)
    if bad is not None:
        return f"has {bad!r} (U+{ord(bad):04X}) at index {value.index(bad)}, which {what} cannot carry"
    return None


def header_problem(name: str, value: object) -> str | None:
    """Why the HTTP header ``name: value`` cannot be sent as it is, or None."""
    if not isinstance(name, str) or not name or not HEADER_NAME.fullmatch(name):
        return f"name {name!r} is not an HTTP header name (letters, digits and !#$%&'*+.^_`|~-)"
    if len(name) > MAX_HEADER_NAME_BYTES:
        return f"name {name[:32]!r}... is {len(name)} bytes, more than {MAX_HEADER_NAME_BYTES}"
    if not isinstance(value, str):
        return f"{name}: the value is a {type(value).__name__}, not a string"
    problem = value_problem(value, max_bytes=MAX_HEADER_VALUE_BYTES, allowed=HEADER_VALUE, what="a header value")
    return f"{name}: {problem}" if problem else None


def _quoted_path(path: str) -> str:
    """``path`` as a problem quotes it: masked before it is cut, so a cut never leaves a card's first digits."""
    return masked_prefix(repr(path[:1024]), 66)


def path_problem(path: str) -> str | None:
    """Why ``path`` is not a path under a target's base URL (the sink's Targets.join rule, and a length), or None."""
    if not path.startswith("/") or path.startswith("//"):
        return f"{_quoted_path(path)} must start with a single '/'"
    problem = value_problem(path, max_bytes=MAX_PATH_BYTES, allowed=PATH, what="a URL path")
    if problem is None and ("\\" in path or "#" in path):
        problem = "has '\\' or '#', which a URL path cannot carry"
    if problem is not None:
        return problem
    segments = (unquote(s.split(";", 1)[0]) for s in path.split("?", 1)[0].split("/"))
    if any(s in (".", "..") for s in segments):
        return f"{_quoted_path(path)} has a dot segment: it would leave the target's base URL"
    return None


def check_kafka_headers(decision_id: str, headers: Mapping[str, str]) -> None:
    """Refuse Kafka headers of a request record the sink would copy onto its HTTP request and could not send.

    The sink copies ``traceparent`` and ``tracestate`` (HttpRequests.TRACE_HEADERS); the others stay in Kafka.
    """
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            kinds = f"{type(name).__name__} name and {type(value).__name__} value"
            problem = f"a header is not a pair of strings: {kinds}"
            raise OutboxRequestError(decision_id, "Kafka headers", problem, "pass str names and values")
        if name.lower() in TRACE_HEADERS:
            problem = header_problem(name, value)
            if problem:
                raise OutboxRequestError(
                    decision_id, f"Kafka header {name}", problem,
                    "a W3C trace context value (visible US-ASCII, at most 8 KiB), or leave the header out",
                )  # fmt: skip


def derive_decision_id(key: str, event_id: str, model_version: str) -> str:
    """sha-256 hex of (business key, input event id, model version), joined by U+001F: never random.

    ``ikkai.contract.ids.decision_id``, as the infer job derives it, so a service and the job agree
    on the id of the same decision; here the parts are checked first.

    The same event scored by the same model always yields the same id, so a replay or a
    retried batch produces the same Idempotency-Key and the receiver applies the effect once.
    """
    for name, part in (("key", key), ("event_id", event_id), ("model_version", model_version)):
        if not part or "\x1f" in part:
            raise OutboxRequestError("", name, f"{part!r} cannot be part of a decision id", fix="pass a non-empty id")
    return ids.decision_id(key, event_id, model_version)


def default_effect(target: str, path: str) -> str:
    """The effect name of a request that names none: ``target + path`` (its receipt's ``effect``).

    A name, not a key: the explicit effect ``api/ok/1`` has the same name; their keys differ (v2).
    """
    return target + path


def derive_idempotency_key(
    decision_id: str,
    effect: str | None = None,
    *,
    target: str | None = None,
    path: str | None = None,
    version: KeyVersion = KEY_VERSION,
) -> str:
    """The Idempotency-Key of one side effect: ``effect`` named explicitly, or else the default effect of
    ``target`` + ``path``; ``version`` as the sink's ``outbox.idempotency.key.version`` (v2, the bundle's).

    One key per side effect: real APIs and API gateways keep ONE key space for every path, so
    the hold and the notification of one decision must not share a key (the second would get
    the first's stored response and never be applied), and neither may an explicit effect and
    another request's default effect (v2 tags which one it is: ``ikkai.contract.ids``). The outbox
    sink computes the same (IdempotencyKey.derive in outbox_sink/connector); every attempt and
    replay of the effect carries the same key.
    """
    if version not in KEY_VERSIONS:
        raise OutboxRequestError(decision_id, "version", f"{version!r:.40} is no key version", fix="v2, or v1")
    if not effect and (target is None or path is None):
        raise OutboxRequestError(
            decision_id, "effect", "neither an effect nor a target and path", fix="name the effect, or pass target= "
            "and path= for the default effect",
        )  # fmt: skip
    if not decision_id:
        raise OutboxRequestError(decision_id, "decision_id", "is empty", fix="use derive_decision_id(...)")
    for name, part in (("decision_id", decision_id), ("effect", effect or "")):
        if version == "v1" and ids.SEPARATOR in part:  # v1 joins by U+001F: the split would be ambiguous
            raise OutboxRequestError(decision_id, name, f"{part!r:.80} holds U+001F, which a v1 key cannot take")
    return ids.idempotency_key(decision_id, effect, target or "", path or "", version=version)


@dataclass(frozen=True)
class OutboxRequest:
    """One side effect to perform: ``target`` is an alias from the sink's allow-list, never a URL.

    ``effect`` names which side effect of the decision this is (``hold-payment``,
    ``notify-customer``); None means the default effect, ``target + path``. The Idempotency-Key is
    derived from (``decision_id``, effect), so each side effect of a decision has its own key, and two
    requests with the same decision and effect are one effect (the second is a repeat).
    """

    decision_id: str
    key: str
    target: str
    path: str
    body: bytes
    created_at: int  # event time in epoch milliseconds, from the decision: never the wall clock
    method: str | None = None  # None: the target alias's default method
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    model_version: str | None = None
    effect: str | None = None  # None: target + path

    @property
    def effect_name(self) -> str:
        return self.effect or default_effect(self.target, self.path)

    @property
    def idempotency_key(self) -> str:
        """The key the shipped sink sends for this request (``KEY_VERSION``, v2)."""
        return self.idempotency_key_as(KEY_VERSION)

    def idempotency_key_as(self, version: KeyVersion) -> str:
        """The key a sink with ``outbox.idempotency.key.version = version`` sends for this request."""
        return ids.idempotency_key(self.decision_id, self.effect, self.target, self.path, version=version)

    def key_version(self, idempotency_key: str) -> KeyVersion | None:
        """Which version made ``idempotency_key`` (a receipt's, a server's log) of this request; None: neither.

        The sink's setting decides the version, and a receipt carries the key it sent, not the
        version: this tells it from the request, so a reader matching receipts to requests across
        a v1 -> v2 migration needs no setting of its own.
        """
        return next((v for v in KEY_VERSIONS if self.idempotency_key_as(v) == idempotency_key), None)

    def __post_init__(self) -> None:
        check = self._problem()
        if check:
            name, problem, fix = check
            raise OutboxRequestError(self.decision_id, name, problem, fix)

    def _problem(self) -> tuple[str, str, str | None] | None:
        if not self.decision_id:
            return "decision_id", "is empty", "use derive_decision_id(key, event_id, model_version)"
        if not self.key:
            return "key", "is empty", "the business key (payment_id, order_id) is the Kafka record key"
        if not self.target or "/" in self.target or ":" in self.target:
            return (
                "target",
                f"{self.target!r} is not an alias",
                "name an alias of the sink's allow-list, e.g. payments-api",
            )
        ids = (
            ("decision_id", self.decision_id, "use derive_decision_id(key, event_id, model_version): 64 hex digits"),
            ("key", self.key, "key the request by its business id (payment_id, order_id), not by free text"),
            ("target", self.target, "name an alias of the sink's allow-list, e.g. payments-api"),
            ("model_version", self.model_version, "a short version such as fraud@3"),
            ("effect", self.effect, "a short stable name such as hold-payment"),
        )
        for name, value, fix in ids:
            if value is None:
                continue
            what = "a Kafka key" if name == "key" else f"the {name} (an X-Ikkai-* header value)"
            problem = value_problem(value, max_bytes=MAX_ID_BYTES, allowed=KEY if name == "key" else ID, what=what)
            if problem or not value:
                return name, problem or "is empty", fix
        problem = value_problem(
            self.content_type, max_bytes=MAX_ID_BYTES, allowed=HEADER_VALUE, what="the Content-Type header"
        )
        if problem or not self.content_type.strip():
            return "content_type", problem or "is empty", "a media type such as application/json"
        problem = path_problem(self.path)
        if problem:
            return "path", problem, "percent-encode the path's parts (urllib.parse.quote); it is relative to the alias"
        if self.method is not None and self.method.upper() not in METHODS:
            return "method", f"{self.method!r} is not one of {sorted(METHODS)}", None
        reserved = sorted(h for h in self.headers if h.lower() in RESERVED_HEADERS or h.lower().startswith("x-ikkai-"))
        if reserved:
            return "headers", f"{reserved} are set by the outbox sink", "drop them from the request"
        if len(self.headers) > MAX_HEADERS:
            return "headers", f"{len(self.headers)} headers, more than {MAX_HEADERS}", "send fewer headers"
        for name, value in self.headers.items():
            problem = header_problem(name, value)
            if problem:
                return "headers", problem, "send visible US-ASCII only: percent-encode or base64 anything else"
        if self.created_at < 0:
            return "created_at", "must be epoch milliseconds of the decision's event time", None
        return None

    def to_record(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "key": self.key,
            "target": self.target,
            "path": self.path,
            "method": self.method,
            "content_type": self.content_type,
            "body": bytes(self.body),
            "headers": dict(self.headers),
            "created_at": self.created_at,
            "model_version": self.model_version,
            "effect": self.effect,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> OutboxRequest:
        return cls(**{k: record[k] for k in cls.__dataclass_fields__ if k in record})


def effect_kind_of(given: EffectKind | None, effect: str | None, target: str) -> EffectKind:
    """``given`` where a receipt (v3) or a request says it; else read from the name, as for receipts written before
    outbox_receipt v3: a default effect's name is the target, then a ``/`` (the path), or the target alone (v1)."""
    if given is not None:
        return given
    if effect is None or effect.startswith(target + "/"):
        return "DEFAULT"
    return "EXPLICIT"


class EffectRef(NamedTuple):
    """Which side effect a receipt is for: its decision, the kind of its effect, the effect's name.

    The name alone is not enough: the explicit effect ``api/ok/1`` and the default effect of
    target ``api`` with path ``/ok/1`` share it, and are two effects with two Idempotency-Keys.
    """

    decision_id: str
    kind: EffectKind
    name: str


@dataclass(frozen=True)
class Receipt:
    """The final outcome of one side effect, as the outbox sink wrote it to ``outbox.receipts``.

    A reader identifies the effect by ``effect_ref``: (``decision_id``, ``effect_kind``,
    ``effect_id``). Receipts are written at least once, so one effect may have several; when they
    disagree, DELIVERED wins (``prevailing``): the effect happened, whatever an earlier attempt
    concluded.
    """

    decision_id: str
    key: str
    target: str
    outcome: Outcome
    status_code: int | None
    attempts: int
    first_attempt_at: int
    last_attempt_at: int
    response_digest: str | None
    reason: str | None
    effect: str | None = None  # None in receipts written before outbox_receipt v2
    idempotency_key: str | None = None
    effect_kind: EffectKind | None = None  # None in receipts written before outbox_receipt v3

    @property
    def delivered(self) -> bool:
        return self.outcome == "DELIVERED"

    @property
    def effect_id(self) -> str:
        """Which effect of its decision this receipt is for: its effect, or (older receipts) its target."""
        return self.effect or self.target

    @property
    def kind(self) -> EffectKind:
        """Whether the request named its effect or its effect is target + path; for receipts written before
        outbox_receipt v3, read from the name: a default effect's name is the target, then a ``/`` (the path), or the
        target alone (v1). An explicit name of that shape was the one case v2 receipts could not tell apart (the
        docs asked explicit names not to start with the target and ``/``)."""
        return effect_kind_of(self.effect_kind, self.effect, self.target)

    @property
    def effect_ref(self) -> EffectRef:
        """The side effect this receipt is for: what a reader keeps one verdict per."""
        return EffectRef(self.decision_id, self.kind, self.effect_id)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Receipt:
        return cls(**{k: record[k] for k in cls.__dataclass_fields__ if k in record})

    def to_record(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def prevailing(current: Receipt, later: Receipt) -> Receipt:
    """Which of two receipts of one effect a reader should believe: DELIVERED wins, else the first.

    A DEAD_LETTERED receipt (retry budget exhausted, say) followed by a DELIVERED one (the DLQ
    record replayed, or a redelivery answered with the stored response) means the effect
    happened; a DEAD_LETTERED after a DELIVERED cannot undo it. Between equal outcomes the first
    is kept (a repeat carries the same facts).
    """
    if later.delivered and not current.delivered:
        return later
    return current

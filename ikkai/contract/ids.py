"""The ids every room must derive the same way: a decision's id, a side effect's Idempotency-Key, a job's Spark
application name. Pure.

Both are sha-256 hex of their parts, never random: the same event scored by the same model version
always has the same ``decision_id``, so a retried batch or a replay produces the same decision, and
the same side effect of it the same key, which the receiving API applies once.

``decision_id`` joins its parts by U+001F. The Idempotency-Key (version ``v2``) hashes a
length-prefixed sequence instead, tagged by the kind of effect, so no two different (decision,
effect) pairs share a key whatever characters they hold: an explicit effect ``api/ok/1`` and the
default effect of target ``api`` + path ``/ok/1`` differ. ``v1`` (decision_id U+001F effect name) is
kept for a migration only. The outbox sink (Java, ``IdempotencyKey.derive``) computes the same keys;
tests/outbox_sink/idempotency_key_vectors.json pins both byte for byte.
"""

from __future__ import annotations

import hashlib
from typing import Literal

SEPARATOR = "\x1f"
KeyVersion = Literal["v1", "v2"]
KEY_VERSIONS: tuple[KeyVersion, ...] = ("v1", "v2")
KEY_VERSION: KeyVersion = "v2"  # what the shipped sink bundle sends (outbox.idempotency.key.version)


def _digest(*parts: str) -> str:
    return hashlib.sha256(SEPARATOR.join(parts).encode()).hexdigest()


def decision_id(key: str, event_id: str, model_version: str) -> str:
    """sha-256 hex of (business key, input event id, model version)."""
    return _digest(key, event_id, model_version)


def application_name(job: str) -> str:
    """The Spark application name of job ``job`` (``ikkai-infer``): what spark-submit is given, what a Kubernetes
    SparkApplication is called, and how a standalone master's ``/json/`` names the running job."""
    return f"ikkai-{job}"


def idempotency_key(
    decision_id: str, effect: str | None, target: str = "", path: str = "", *, version: KeyVersion = KEY_VERSION
) -> str:
    """The Idempotency-Key of one side effect of a decision: lowercase sha-256 hex of its preimage.

    ``effect`` names the effect explicitly; None or empty means the default effect, ``target`` +
    ``path``. Any strings are taken (the sink keys requests before it validates them).
    """
    return hashlib.sha256(idempotency_key_preimage(decision_id, effect, target, path, version=version)).hexdigest()


def idempotency_key_preimage(
    decision_id: str, effect: str | None, target: str = "", path: str = "", *, version: KeyVersion = KEY_VERSION
) -> bytes:
    """The bytes the key hashes.

    v2: ``part("v2") part(decision_id) part("e") part(effect)`` for an explicit effect,
    ``part("v2") part(decision_id) part("d") part(target) part(path)`` for the default one, where
    ``part(s)`` is the decimal length of ``s`` in UTF-8 bytes, ``:``, and those bytes (a prefix code:
    the sequence, tag included, is read back from the bytes unambiguously). v1: ``decision_id``
    U+001F (effect, or target + path), which is not injective.
    """
    explicit = bool(effect)
    if version == "v1":
        return _utf8(decision_id + SEPARATOR + (effect if effect else target + path))
    if version != "v2":
        raise ValueError(f"no Idempotency-Key version {version!r:.40} (v1 or v2)")
    parts = ("v2", decision_id, "e", effect or "") if explicit else ("v2", decision_id, "d", target, path)
    return b"".join(_part(p) for p in parts)


def _part(text: str) -> bytes:
    data = _utf8(text)
    return str(len(data)).encode("ascii") + b":" + data


def _utf8(text: str) -> bytes:
    """UTF-8 as Java's String.getBytes writes it: a lone surrogate becomes '?'."""
    return text.encode("utf-8", "replace")

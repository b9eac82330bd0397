"""The ids every room must derive the same way: a decision's id, a side effect's Idempotency-Key, a job's Spark
application name. Pure.

Both are sha-256 hex of their parts joined by U+001F (a character no id contains), never random:
the same event scored by the same model version always has the same ``decision_id``, so a retried
batch or a replay produces the same decision, and the same side effect of it the same key, which
the receiving API applies once. The outbox sink (Java, ``OutboxRequest.idempotencyKey``) computes
the same key; a shared test vector pins both.
"""

from __future__ import annotations

import hashlib

SEPARATOR = "\x1f"


def _digest(*parts: str) -> str:
    return hashlib.sha256(SEPARATOR.join(parts).encode()).hexdigest()


def decision_id(key: str, event_id: str, model_version: str) -> str:
    """sha-256 hex of (business key, input event id, model version)."""
    return _digest(key, event_id, model_version)


def application_name(job: str) -> str:
    """The Spark application name of job ``job`` (``ikkai-infer``): what spark-submit is given, what a Kubernetes
    SparkApplication is called, and how a standalone master's ``/json/`` names the running job."""
    return f"ikkai-{job}"


def idempotency_key(decision_id: str, effect: str) -> str:
    """sha-256 hex of (decision_id, effect): one key per side effect of a decision."""
    return _digest(decision_id, effect)

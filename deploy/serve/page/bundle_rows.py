"""The bundles view's rows of one environment: each bundle rendered, planned against Connect and compared with
its last recorded apply (``deploy.applies``). Read in the background by ``deploy.serve.page.refreshed`` (kept by
``deploy.serve.page.environment_readers``), never while a viewer waits longer than ``WAIT_SECONDS``.

A bundle that does not render or plan is a row with its error (the first line), never a missing row: a Connect
validation that fails (a 5xx: ``deploy.connect_rest`` does not retry it) is the plan's validation error on the
row, shown at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deploy import applies, bundle_ops
from deploy.serve.page.views import bundle_row, environments, last_apply_view
from deploy.serve.service import ControlPlane
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import APPLIES
from ikkai.errors import IkkaiError

FRESH_SECONDS = 5.0  # rows younger than this are served as they are
WAIT_SECONDS = 1.5  # the longest a viewer waits for a read before it gets the last rows (or none yet)
APPLIES_SECONDS = 3.0  # the read of the last applies; unread, they are shown as unknown


def one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, IkkaiError) else f"{type(exc).__name__}: {exc}"
    return (text.splitlines() or [type(exc).__name__])[0]


def last_applies(kafka: Callable[[], KafkaContext], env: str) -> tuple[dict[str, applies.LastApply], str | None]:
    """The environment's last apply of each bundle (``kafka``: its cluster, which may not be known), and why they
    could not be read (None when they were)."""
    try:
        found, complete = applies.last_applies(kafka(), env, APPLIES_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the record is best-effort: unread, the view says so and goes on
        return {}, one_line(exc)
    return found, None if complete else f"{APPLIES} not read to its end within {APPLIES_SECONDS:.0f} s"


def bundle_rows(plane: ControlPlane, kafka: Callable[[], KafkaContext], env: str) -> list[dict[str, Any]]:
    """A row per bundle of ``env`` (``views.bundle_row``), or with the ``error`` that kept it from one."""
    last, unread = last_applies(kafka, env)
    rows = []
    for bundle in environments(plane.bundles_dir).get(env, []):
        try:
            request = plane.request(bundle, env)
            rendered = bundle_ops.rendered(request)
            plan = bundle_ops.reconciler(request).plan(rendered).as_dict()
            latest = last_apply_view(last.get(rendered.name), applies.config_digest(rendered))
            rows.append(bundle_row(bundle, plan, owner=rendered.bundle.manifest.owner, last_apply=latest))
        except IkkaiError as exc:
            rows.append({"bundle": bundle, "sync": "unknown", "error": one_line(exc)})
        rows[-1]["applies_unread"] = unread
    return rows


def unread_rows(exc: Exception) -> list[dict[str, Any]]:
    """The rows when the read itself failed (a bug, not a bundle's error): one row saying so."""
    return [{"bundle": "*", "sync": "unknown", "error": f"the bundles could not be read: {one_line(exc)}"}]

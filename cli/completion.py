"""Shell completion of bundle and connector names (click's ``_IKKAI_COMPLETE=bash_source ikkai``).

Completion never fails loudly: a Connect cluster that cannot be reached at once completes nothing.
Connector names come from the cluster the command line names so far (``--env``, ``--connect-url``,
``--clusters``), asked with a short connect timeout and no retries.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.shell_completion import CompletionItem

from ikkai.errors import IkkaiError

COMPLETION_CONNECT_TIMEOUT = 0.5


def complete_bundle(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shipped bundle names, then folders (a bundle can be any folder holding bundle.yaml)."""
    from deploy.bundle_ops import BUNDLES

    names = sorted(p.name for p in BUNDLES.iterdir() if (p / "bundle.yaml").is_file()) if BUNDLES.is_dir() else []
    items = [CompletionItem(n) for n in names if n.startswith(incomplete)]
    if "/" in incomplete or incomplete.startswith(".") or not items:
        items.append(CompletionItem(incomplete, type="dir"))
    return items


def complete_connector(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The names of the connectors on the cluster the command line points at."""
    from deploy.bundle_ops import connect_client

    params = ctx.params
    try:
        client = connect_client(str(params.get("env") or "dev"), params.get("connect_url"), _path(params))
        client.connect_timeout = COMPLETION_CONNECT_TIMEOUT
        client.read_timeout = 2.0
        client.retry_deadline = 0.0
        names = client.connectors()
    except (IkkaiError, OSError):
        return []
    return [CompletionItem(n) for n in sorted(names) if n.startswith(incomplete)]


def _path(params: dict[str, object]) -> Path | None:
    value = params.get("clusters")
    return Path(str(value)) if value else None

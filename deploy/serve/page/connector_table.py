"""The connectors view's table of one environment: every bundle's connectors from ONE expanded Connect call,
kept for ``FRESH_SECONDS`` however many look, and cut into pages. The page at a thousand connectors.

A refresh is one ``GET /connectors?expand=status&expand=info`` (``Reconciler.live``) for all the bundles of the
environment, then each bundle rendered (pure) and its rows shaped by ``deploy.reconcile.status_rows`` (secrets
cut out of traces) and ``deploy.serve.page.views.connector_rows``. Viewers in that interval get the same table.
``table(wait)`` never waits longer than ``wait`` seconds: while another thread refreshes, or when Connect is
slow, it returns the last table it has (``stale``) or none; the refresh goes on and serves the next viewer.
A failure (Connect unreachable, a bundle that does not render) is kept like a table, per bundle, so a worker
that is down is asked once per interval, not once per viewer.

The connectors Connect runs that no bundle of the environment names (made by hand, by a bundle that does not
render here, or by a bundle's earlier name) are listed too, after the bundles' rows, under ``UNBUNDLED``.

A bundle is rendered again only when one of its files changed (``fingerprint``: names, sizes and modification
times under its folder): at a thousand connectors the render costs about as much as the Connect call.

``page_of`` filters by name and state and cuts the rows into pages; pure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.render import RenderedBundle
from deploy.reconcile import LiveConnector, status_rows, unbundled_rows
from deploy.serve.page.refreshed import Refreshed
from ikkai.errors import IkkaiError

FRESH_SECONDS = 5.0  # a table younger than this is served as it is (the view reloads every REFRESH_SECONDS)
WAIT_SECONDS = 1.5  # the longest a viewer waits for a refresh before it gets the last table (views: 2 s at most)
PAGE_SIZE = 50
UNBUNDLED = ""  # the bundle of the rows of connectors no bundle of the environment names (listed after them)


@dataclass(frozen=True)
class Row:
    bundle: str
    connector: Mapping[str, Any]  # as deploy.serve.page.views.connector_rows shapes it


@dataclass(frozen=True)
class Table:
    at: float  # the reader's clock when it was read
    rows: tuple[Row, ...]  # sorted by bundle, then connector name; the UNBUNDLED ones last
    errors: Mapping[str, str] = field(default_factory=dict)  # bundle → the first line of why it has no rows
    stale: bool = False  # a viewer got it because a newer one was not ready within its wait


@dataclass(frozen=True)
class TablePage:
    rows: tuple[Row, ...]
    number: int  # 1-based, clamped into 1..pages
    pages: int
    total: int  # rows that pass the filter
    all_rows: int  # rows before the filter


def fingerprint(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Each file under ``folder`` (the bundle: manifest, templates, values) with its size and modification time."""
    return tuple(
        sorted(
            (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")
            if p.is_file()
        )
    )


def page_of(table: Table, number: int, size: int = PAGE_SIZE, name: str = "", state: str = "") -> TablePage:
    """Page ``number`` (clamped) of the rows whose connector name contains ``name`` and whose state is ``state``
    (either empty: no filter), ``size`` rows a page. Pure."""
    needle, wanted = name.strip().lower(), state.strip().upper()
    rows = [
        r
        for r in table.rows
        if needle in str(r.connector["name"]).lower() and (not wanted or str(r.connector["state"]) == wanted)
    ]
    pages = max(1, -(-len(rows) // size))
    number = min(max(1, number), pages)
    return TablePage(tuple(rows[(number - 1) * size : number * size]), number, pages, len(rows), len(table.rows))


class ConnectorTable:
    """One environment's table, read at most every ``FRESH_SECONDS``; thread-safe.

    ``live`` reads Connect once (``Reconciler.live`` of the environment's client); ``bundles`` renders each
    bundle of the environment (an ``IkkaiError`` per bundle that does not); ``shape`` turns one bundle's
    ``status_rows`` into the page's connector rows.
    """

    def __init__(
        self,
        live: Callable[[], Mapping[str, LiveConnector]],
        bundles: Callable[[], Mapping[str, RenderedBundle | IkkaiError]],
        shape: Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.live = live
        self.bundles = bundles
        self.shape = shape
        self.clock = clock
        self.reads = 0  # how often Connect was asked (for tests and the benchmark)
        self._refreshed = Refreshed(self._read, self._failed, fresh=FRESH_SECONDS, name="connector-table", clock=clock)

    def table(self, wait: float = WAIT_SECONDS) -> Table | None:
        """The table, read again (on a thread of its own) if older than ``FRESH_SECONDS``; when that read takes
        longer than ``wait`` seconds, the last table marked ``stale`` (None before the first). One read at a time."""
        reading = self._refreshed.latest(wait)
        if reading is None:
            return None
        return _stale(reading.value) if reading.stale else reading.value

    def _failed(self, exc: Exception) -> Table:
        """A bug in a bundle's shaping must not stop the table for good: it is the table's one error."""
        return Table(self.clock(), (), {"*": f"the table could not be read: {exc!r}"})

    def _read(self) -> Table:
        at = self.clock()
        rendered = self.bundles()
        errors = {b: _one_line(r) for b, r in rendered.items() if isinstance(r, IkkaiError)}
        good = {b: r for b, r in rendered.items() if not isinstance(r, IkkaiError)}
        self.reads += 1
        try:
            live = self.live()
        except IkkaiError as exc:
            return Table(at, (), {**errors, **{b: _one_line(exc) for b in (*good, UNBUNDLED)}})
        rows = [Row(b, c) for b in sorted(good) for c in sorted(self.shape(status_rows(good[b], live)), key=_name)]
        bundled = {str(r.connector["name"]) for r in rows}
        rows += [Row(UNBUNDLED, c) for c in self.shape(unbundled_rows(live, bundled))]
        return Table(at, tuple(rows), errors)


def _name(connector: Mapping[str, Any]) -> str:
    return str(connector["name"])


def _stale(table: Table) -> Table:
    return Table(table.at, table.rows, table.errors, stale=True)


def _one_line(exc: IkkaiError) -> str:
    return str(exc).splitlines()[0]

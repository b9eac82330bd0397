"""Measure the operator page at scale: a thousand connectors, and stage topics of a hundred partitions.

    .venv/bin/python -m benchmarks.page_scale [--connectors 1000] [--partitions 100] [--rounds 5]

Uses the cluster named by IKKAI_CONNECT_URL / IKKAI_BOOTSTRAP_SERVERS, else starts the embedded stack in a
temporary home (and stops it afterwards). The bundle is generated: N FileStreamSource connectors, created
STOPPED (``initial_state``, KIP-980: no task runs, nothing is read) from the bundle's own rendered configs.
The pipeline's topics are created with ``--partitions`` partitions each (empty). Then ``ikkai serve``'s real
server (uvicorn, on a free loopback port) is asked, as a logged-in browser would, for:

* the connectors view: its first render (one expanded Connect call for every bundle, the bundle rendered),
  a cached render (within ``deploy.serve.page.connector_table.FRESH_SECONDS``), the last page, and the HTML sizes;
* every other view (``VIEWS``: bundles, flow and its chart, health with the reconciliation, dead letters and
  latency, the latency chart) over the hundred-partition topics: its first answer; for a view that answers from a
  background reading and says it is still reading, how long until the reading shows; a cached answer's median;
  then a table of each view's first and cached answer against ``TARGET_SECONDS``;

and, beside the server, the expanded ``GET /connectors?expand=status&expand=info`` call on its own, and the
bundle's render. Prints tables; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import re
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import requests
import yaml

from benchmarks.harness import bench_stack, print_table
from connectors.render import RenderedBundle
from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest
from deploy.connect_rest import ConnectClient
from deploy.eos_view.flow import TOPICS
from deploy.reconcile import Reconciler
from deploy.serve.http import make_server
from deploy.serve.page.connector_table import FRESH_SECONDS, PAGE_SIZE, ConnectorTable
from deploy.serve.page.health_sampler import DEFAULT_SECONDS as HEALTH_SECONDS
from deploy.serve.page.views import connector_rows
from deploy.serve.service import ControlPlane
from ikkai.contract.kafka import KafkaContext, ensure_topics
from ikkai.errors import IkkaiError

ENV = "bench"
TOKEN = "page-scale-" + "x" * 16
TEMPLATE = """{
  "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
  "tasks.max": "1",
  "file": {{ (drop ~ "/" ~ connector ~ ".jsonl") | tojson }},
  "topic": {{ ("ingest.page-scale." ~ run ~ "." ~ connector) | tojson }},
  "producer.override.enable.idempotence": "true",
  "producer.override.acks": "all",
  "exactly.once.support": "required",
  "transforms": "key",
  "transforms.key.type": "dev.ikkai.connect.transforms.JsonFieldToKey",
  "transforms.key.field": "payment_id"
}
"""


def write_bundle(root: Path, connectors: int, run: str, cluster: KafkaContext, connect_url: str) -> Path:
    """A bundles folder with one generated bundle of ``connectors`` connectors, and its clusters file."""
    folder = root / "bundles" / "page-scale"
    (folder / "templates").mkdir(parents=True)
    (folder / "values").mkdir()
    manifest = {
        "name": "page-scale",
        "owner_prefix": f"page-scale-{run}.",
        "connectors": [{"name": f"c{i:04d}", "template": "templates/source.json.j2"} for i in range(connectors)],
    }
    (folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    (folder / "templates" / "source.json.j2").write_text(TEMPLATE)
    (folder / "values" / f"{ENV}.yaml").write_text(yaml.safe_dump({"drop": str(root / "drop"), "run": run}))
    clusters = root / "bundles" / "clusters.yaml"
    entry = {"connect_url": connect_url, "bootstrap_servers": cluster.bootstrap_servers}
    clusters.write_text(yaml.safe_dump({ENV: entry}))
    return folder


@contextmanager
def served(plane: ControlPlane) -> Iterator[str]:
    server = make_server(plane)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        thread.join(30)
        server.server_close()


def timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def median_of(rounds: int, call: Callable[[], object]) -> float:
    return statistics.median(timed(call)[0] for _ in range(rounds))


def shown(page: object) -> list[object]:
    """The page's HTML size and the connector rows on it (a page that waited in vain shows none)."""
    text = page.text  # type: ignore[attr-defined]
    return [len(page.content), len(re.findall(r'<tr class="connector"', text))]  # type: ignore[attr-defined]


# The views past the connectors one: (name, path under /ui/env/<env>, what it shows until its background reading
# is ready; None: it answers from a cache filled beside it). The health view carries the reconciliation, the dead
# letters by reason and the latency table; the latency chart is its own request, like the flow chart.
VIEWS = (
    ("bundles view (plans of every bundle)", "bundles", 'id="bundles-reading"'),
    ("flow view", "flow", 'id="flow-reading"'),
    ("flow chart (flow.svg)", "flow.svg", None),
    ("health view (markers, lag, reconciliation, dead letters, latency)", "health", None),
    ("latency chart (latency.svg)", "latency.svg", None),
)
TARGET_SECONDS = 5.0  # every view, at 1,000 connectors and 100 partitions
READY_SECONDS = 900.0  # the longest a background reading is waited for before the benchmark gives up on it


def views(get: Callable[[str], requests.Response], base: str, rounds: int) -> list[tuple[str, float, int, bool]]:
    """Each of ``VIEWS``: its first answer, the time until its background reading shows (a view that says it is
    reading answers at once), and a cached answer's median; (measurement, seconds, bytes, cached?)."""
    out: list[tuple[str, float, int, bool]] = []
    for name, path, reading in VIEWS:
        first_s, first = timed(lambda path=path: get(f"{base}/{path}"))  # type: ignore[misc]
        page = cast(requests.Response, first)
        out.append((f"{name}, first answer", first_s, len(page.content), False))
        if reading is not None:
            started = time.perf_counter()
            while reading in page.text:
                if time.perf_counter() - started > READY_SECONDS:
                    raise SystemExit(f"{name}: not read within {READY_SECONDS:.0f} s")
                time.sleep(1.0)  # a reload's pace: the condition is polled
                page = get(f"{base}/{path}")
            ready = time.perf_counter() - started
            state = re.findall(r'class="state [^"]*">([^<]*)<', page.text)  # the bundles' rows: what was read
            said = f" ({', '.join(state)})" if state else ""
            out.append((f"{name}: its reading shown after{said} (not a wait)", ready, len(page.content), False))
        cached = median_of(rounds, lambda path=path: get(f"{base}/{path}"))  # type: ignore[misc]
        out.append((name, cached, 0, True))
    return out


def targets(rows: Sequence[Sequence[object]]) -> list[list[object]]:
    """Per view, its first answer and cached median against ``TARGET_SECONDS``, from the measurement rows."""
    by_name = {str(r[0]): float(cast(float, r[1])) for r in rows}
    first_of = {"connectors view": "connectors view, first render (page 1 of"}
    out: list[list[object]] = []
    for name in ["connectors view", *(v[0] for v in VIEWS)]:
        first = next(s for n, s in by_name.items() if n.startswith(first_of.get(name, f"{name}, first answer")))
        cached = next(s for n, s in by_name.items() if n.startswith(f"{name}, cached render"))
        out.append([name, first, cached, TARGET_SECONDS, "yes" if max(first, cached) <= TARGET_SECONDS else "NO"])
    return out


def measure(cluster: KafkaContext, connect_url: str, home: Path, connectors: int, partitions: int, rounds: int) -> None:
    run = uuid.uuid4().hex[:6]
    folder = write_bundle(home, connectors, run, cluster, connect_url)
    request = BundleRequest(str(folder), ENV, connect_url=connect_url, clusters=folder.parent / "clusters.yaml")
    render_s, bundle = timed(lambda: bundle_ops.rendered(request))
    client = ConnectClient(connect_url)
    configs = [(c.name, c.config) for c in bundle.connectors]  # type: ignore[attr-defined]
    with ThreadPoolExecutor(8) as pool:
        create_s, _ = timed(
            lambda: list(pool.map(lambda nc: client.create_connector(nc[0], nc[1], "STOPPED"), configs))
        )
    ensure_topics(cluster, [t for t in TOPICS], partitions)
    live = len(client.connectors())
    try:
        expanded_first, _ = timed(client.connectors_expanded)
        expanded = median_of(rounds, client.connectors_expanded)
        size = len(requests.get(f"{connect_url}/connectors?expand=status&expand=info", timeout=60).content)
        reconciler = Reconciler(ConnectClient(connect_url))
        kept: dict[str, RenderedBundle | IkkaiError] = {"page-scale": cast(RenderedBundle, bundle)}
        table = ConnectorTable(reconciler.live, lambda: kept, lambda rows: connector_rows({"connectors": rows}, {}))
        refresh = median_of(rounds, table._read)  # what a refresh costs once the bundle's render is kept
        # health sampled in the background, as ikkai serve does it
        plane = ControlPlane(TOKEN, folder.parent, connect_url=connect_url, clusters=folder.parent / "clusters.yaml",
                             health_seconds=HEALTH_SECONDS)  # fmt: skip
        rows: list[list[object]] = [
            [f"create {connectors} STOPPED connectors (8 threads)", create_s, None, None],
            [f"render the bundle of {connectors} (first, in this process)", render_s, None, None],
            [f"GET /connectors?expand=status&expand=info ({live} live), first", expanded_first, size, None],
            [f"GET /connectors?expand=status&expand=info, median of {rounds}", expanded, None, None],
            [f"the table's refresh (that call, rows shaped), median of {rounds}", refresh, None, None],
        ]
        with served(plane) as url:
            session = requests.Session()
            session.headers["Origin"] = url  # as a browser sends it with a form
            # no redirect followed: the home page would redirect to the connectors view and read the table
            session.post(f"{url}/ui/login", data={"token": TOKEN}, allow_redirects=False, timeout=30).raise_for_status()
            view = f"{url}/ui/env/{ENV}/connectors"

            def get(path: str, **params: int) -> requests.Response:
                answer = session.get(path, params=params, timeout=120)
                answer.raise_for_status()
                return answer

            first_s, first = timed(lambda: get(view))
            cached = median_of(rounds, lambda: get(view))
            last_page = -(-connectors // PAGE_SIZE)
            last_s, last = timed(lambda: get(view, page=last_page))
            time.sleep(FRESH_SECONDS)  # the table expires: the next viewer starts a refresh
            refresh_s, refreshed = timed(lambda: get(view, page=2))
            rows += [
                [f"connectors view, first render (page 1 of {last_page})", first_s, *shown(first)],
                [f"connectors view, cached render (< {FRESH_SECONDS:.0f} s old), median", cached, None, None],
                [f"connectors view, page {last_page}", last_s, *shown(last)],
                ["connectors view, page 2 after the table expired (a refresh)", refresh_s, *shown(refreshed)],
            ]
            rows += [
                [f"{name}, cached render, median of {rounds}" if cached else name, seconds, size or None, None]
                for name, seconds, size, cached in views(get, f"{url}/ui/env/{ENV}", rounds)
            ]
        print_table(
            f"the operator page at {connectors} connectors, {partitions} partitions (one embedded Connect worker)",
            ["MEASUREMENT", "SECONDS", "BYTES", "ROWS SHOWN"], rows,
        )  # fmt: skip
        print_table(
            f"every view against its target ({TARGET_SECONDS:g} s at {connectors} connectors, {partitions} partitions)",
            ["VIEW", "FIRST ANSWER (S)", "CACHED, MEDIAN (S)", "TARGET (S)", "WITHIN"], targets(rows),
        )  # fmt: skip
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(client.delete_connector, [name for name, _ in configs]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connectors", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with bench_stack("page-scale") as (cluster, connect_url, home):
        measure(cluster, connect_url, home, args.connectors, args.partitions, args.rounds)


if __name__ == "__main__":
    main()

"""Measure the operator page at scale: a thousand connectors, and stage topics of a hundred partitions.

    .venv/bin/python -m benchmarks.page_scale [--connectors 1000] [--partitions 100] [--rounds 5]

Uses the cluster named by IKKAI_CONNECT_URL / IKKAI_BOOTSTRAP_SERVERS, else starts the embedded stack in a
temporary home (and stops it afterwards). The bundle is generated: N FileStreamSource connectors, created
STOPPED (``initial_state``, KIP-980: no task runs, nothing is read) from the bundle's own rendered configs.
The pipeline's topics are created with ``--partitions`` partitions each (empty). Then ``ikkai serve``'s real
server (uvicorn, on a free loopback port) is asked, as a logged-in browser would, for:

* the connectors view: its first render (one expanded Connect call for every bundle, the bundle rendered),
  a cached render (within ``deploy.serve.page.connector_table.FRESH_SECONDS``), the last page, and the HTML sizes;
* the flow and health views over the hundred-partition topics: first and cached render;

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
from collections.abc import Callable, Iterator
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
  "topic": {{ ("ingest.page-scale." ~ run ~ "." ~ connector) | tojson }}
}
"""


def write_bundle(root: Path, connectors: int, run: str, cluster: KafkaContext, connect_url: str) -> Path:
    """A bundles folder with one generated bundle of ``connectors`` connectors, and its clusters file."""
    bootstrap = cluster.bootstrap_servers  # for the topic kit and the jobs' flags
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
    clusters.write_text(yaml.safe_dump({ENV: {"connect_url": connect_url, "bootstrap_servers": bootstrap}}))
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
        plane = ControlPlane(TOKEN, folder.parent, connect_url=connect_url, clusters=folder.parent / "clusters.yaml")
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
            for name in ("flow", "health"):
                first_s, page = timed(lambda name=name: get(f"{url}/ui/env/{ENV}/{name}"))  # type: ignore[misc]
                cached = median_of(rounds, lambda name=name: get(f"{url}/ui/env/{ENV}/{name}"))  # type: ignore[misc]
                rows += [
                    [f"{name} view, first render ({partitions}-partition topics)", first_s, len(page.content), None],  # type: ignore[attr-defined]
                    [f"{name} view, cached render, median", cached, None, None],
                ]
        print_table(
            f"the operator page at {connectors} connectors, {partitions} partitions (one embedded Connect worker)",
            ["MEASUREMENT", "SECONDS", "BYTES", "ROWS SHOWN"], rows,
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
    with bench_stack("page-scale") as (bootstrap, connect_url, home):
        cluster = KafkaContext.from_environment(bootstrap)  # resolved once, here at the entry
        measure(cluster, connect_url, home, args.connectors, args.partitions, args.rounds)


if __name__ == "__main__":
    main()

"""Deliveries per second of the outbox sink against the reference receiver, next to the receiver's own ceiling.

One run, one machine: starts an embedded stack in a temporary home and the reference
receiver in its own process, then measures

* the receiver's ceiling: a plain load generator (keep-alive HTTP/1.1 clients, unique
  Idempotency-Keys, no Kafka) with 1 and with 8 connections (the sink keeps up to 8 in flight per task);
* the outbox sink draining a pre-filled ``outbox.requests`` topic (3 partitions) with
  tasks.max = 1 and 3: from the first to the last request the receiver saw. The sink's config is
  the ``outbox-sink`` bundle rendered with its dev values, as the platform deploys it.

Usage: .venv/bin/python benchmarks/outbox_throughput.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.harness import bench_stack, print_table  # noqa: E402
from connectors.render import RenderedConnector, load_bundle, render_bundle  # noqa: E402
from deploy.bundle_ops import bundle_folder  # noqa: E402
from deploy.connect_rest import ConnectClient  # noqa: E402
from outbox_sink import (  # noqa: E402
    OutboxEmitter,
    OutboxRequest,
    ReceiptReader,
    create_outbox_topics,
    derive_decision_id,
)

BODY = json.dumps({"payment_id": "pay-0", "amount": 1250, "currency": "EUR"}).encode()


def start_receiver(db: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-c", "from demo.receiver import main; main()", "--db", str(db)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def ceiling(url: str, requests: int, connections: int) -> float:
    """Requests/s the receiver answers (each applied: a fresh key) to ``connections`` keep-alive clients."""
    parsed = urlparse(url)
    per_client = requests // connections
    prefix = uuid.uuid4().hex[:8]

    def client(n: int) -> None:
        conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=30)
        for i in range(per_client):
            conn.request("POST", f"/payments/holds/{n}-{i}", BODY, {"Idempotency-Key": f"load-{prefix}-{n}-{i}"})
            response = conn.getresponse()
            response.read()
            assert response.status == 201, response.status
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(connections)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per_client * connections / (time.perf_counter() - started)


def sink_connector(
    run: str, bootstrap: str, receiver_url: str, topics: dict[str, str], tasks: int
) -> RenderedConnector:
    """The outbox-sink bundle as the platform deploys it (dev values), on this run's topics, named for the run."""
    bundle = load_bundle(bundle_folder("outbox-sink"))
    bundle = replace(bundle, manifest=replace(bundle.manifest, owner_prefix=f"bench-outbox-{run}."))
    sets = [
        f"kafka.bootstrap_servers={bootstrap}",
        f"topics.requests={topics['requests']}",
        f"topics.receipts={topics['receipts']}",
        f"topics.dlq={topics['dlq'].removeprefix('dlq.')}",
        f"targets.payments-api.url={receiver_url}/payments",
        f"targets.notifications-api.url={receiver_url}/notifications",
        f"tasks_max={tasks}",
    ]
    [connector] = render_bundle(bundle, "dev", sets).connectors
    return connector


def sink_rate(bootstrap: str, connect_url: str, receiver_url: str, requests: int, tasks: int) -> tuple[float, float]:
    """(deliveries/s from the first to the last request the receiver saw, seconds until the last receipt)."""
    run = uuid.uuid4().hex[:8]
    topics = {"requests": f"outbox.requests.{run}", "receipts": f"outbox.receipts.{run}", "dlq": f"dlq.outbox.{run}"}
    create_outbox_topics(bootstrap, requests=topics["requests"], receipts=topics["receipts"], dlq=topics["dlq"])
    batch = [
        OutboxRequest(
            decision_id=derive_decision_id(f"pay-{i % 100}", f"evt-{run}-{i}", "bench@1"),
            key=f"pay-{i % 100}",
            target="payments-api",
            path=f"/holds/{run}-{i}",
            body=BODY,
            created_at=1_700_000_000_000 + i,
        )
        for i in range(requests)
    ]
    with OutboxEmitter(bootstrap, topic=topics["requests"]) as emitter:
        for request in batch:
            emitter.emit(request)
    client = ConnectClient(connect_url)
    connector = sink_connector(run, bootstrap, receiver_url, topics, tasks)
    started = time.perf_counter()
    client.put_connector_config(connector.name, connector.config)
    try:
        with ReceiptReader(bootstrap, topic=topics["receipts"]) as reader:
            receipts = reader.wait_for([r.decision_id for r in batch], 600)
        elapsed = time.perf_counter() - started
    finally:
        client.delete_connector(connector.name)
    if len(receipts) != requests or not all(r.delivered for r in receipts.values()):
        raise SystemExit(f"only {sum(r.delivered for r in receipts.values())} of {requests} delivered")
    parsed = urlparse(receiver_url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=60)
    conn.request("GET", "/_ikkai/deliveries")
    seen = [d["received_at"] for d in json.loads(conn.getresponse().read()) if f"/holds/{run}-" in d["path"]]
    return len(seen) / (max(seen) - min(seen)), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    rows: list[list[object]] = []
    with bench_stack("outbox") as (bootstrap, connect_url, scratch):
        receiver, url = start_receiver(scratch / "receiver.sqlite")
        try:
            ceilings = {}
            for connections in (1, 8):
                ceilings[connections] = ceiling(url, args.requests, connections)
                what = f"receiver ceiling, load generator, {connections} connection(s)"
                rows.append([what, args.requests, None, ceilings[connections], ceilings[connections] / ceilings[8]
                             if connections == 8 else None])  # fmt: skip
            for tasks in (1, 3):
                rate, elapsed = sink_rate(bootstrap, connect_url, url, args.requests, tasks)
                what = f"outbox sink, tasks.max={tasks} (3 partitions)"
                rows.append([what, args.requests, elapsed, rate, rate / ceilings[8]])
        finally:
            receiver.terminate()
            receiver.wait(10)
    print_table(
        "outbox sink vs the reference receiver's ceiling",
        ["WHAT", "REQUESTS", "TO LAST RECEIPT S", "PER SECOND", "OF 8-CONNECTION CEILING"],
        rows,
    )


if __name__ == "__main__":
    main()

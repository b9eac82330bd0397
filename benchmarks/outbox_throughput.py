"""Deliveries per second of the outbox sink against the reference receiver, next to the receiver's own ceiling.

One run, one machine: starts an embedded stack in a temporary home and the reference
receiver in its own process, then measures, in every round and in this order,

* the receiver's ceiling: a plain load generator (keep-alive HTTP/1.1 clients, unique
  Idempotency-Keys, no Kafka) with 1 and with 8 connections (the sink keeps up to 8 in flight per task);
* the outbox sink draining a pre-filled ``outbox.requests`` topic (3 partitions) with each
  tasks.max of ``--tasks``: from the first to the last request the receiver saw. The sink's config
  is the ``outbox-sink`` bundle rendered with its dev values, as the platform deploys it;
  ``--receipts-producer linger.ms=5`` adds a run with that receipt-producer setting
  (``outbox.receipts.producer.*``) at the first tasks.max.

Each sink run is set against the 8-connection ceiling of its own round (the machine's load moves
between rounds); the medians over the rounds are the numbers to quote. Before the first round,
``--warmup`` uncounted drains (default 1) let the fresh Connect worker's JIT compile the sink's
path: a worker's first few thousand requests run at a fraction of its later rate, which says
little about a worker that runs for days.

Usage: .venv/bin/python -m benchmarks.outbox_throughput [--requests 3000] [--rounds 3] [--warmup 1] [--tasks 1,2,3]
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

from benchmarks.harness import bench_stack, median, print_table
from connectors.render import RenderedConnector, load_bundle, render_bundle
from deploy.bundle_ops import bundle_folder
from deploy.connect_rest import ConnectClient
from outbox_sink import (
    KafkaContext,
    OutboxEmitter,
    OutboxRequest,
    ReceiptReader,
    create_outbox_topics,
    derive_decision_id,
)

REPO = Path(__file__).resolve().parents[1]

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
    run: str,
    cluster: KafkaContext,
    receiver_url: str,
    topics: dict[str, str],
    tasks: int,
    receipts_producer: dict[str, str] | None = None,
) -> RenderedConnector:
    """The outbox-sink bundle as the platform deploys it (dev values), on this run's topics, named for the
    run; ``receipts_producer`` settings are added as ``outbox.receipts.producer.*``."""
    bundle = load_bundle(bundle_folder("outbox-sink"))
    bundle = replace(bundle, manifest=replace(bundle.manifest, owner_prefix=f"bench-outbox-{run}."))
    sets = [
        f"kafka.bootstrap_servers={cluster.bootstrap_servers}",
        f"topics.requests={topics['requests']}",
        f"topics.receipts={topics['receipts']}",
        f"topics.dlq={topics['dlq'].removeprefix('dlq.')}",
        f"targets.payments-api.url={receiver_url}/payments",
        f"targets.notifications-api.url={receiver_url}/notifications",
        f"tasks_max={tasks}",
    ]
    [connector] = render_bundle(bundle, "dev", sets).connectors
    extra = {f"outbox.receipts.producer.{k}": v for k, v in (receipts_producer or {}).items()}
    return replace(connector, config={**connector.config, **extra}) if extra else connector


def sink_rate(
    cluster: KafkaContext,
    connect_url: str,
    receiver_url: str,
    requests: int,
    tasks: int,
    receipts_producer: dict[str, str] | None = None,
) -> tuple[float, float]:
    """(deliveries/s from the first to the last request the receiver saw, seconds until the last receipt)."""
    run = uuid.uuid4().hex[:8]
    topics = {"requests": f"outbox.requests.{run}", "receipts": f"outbox.receipts.{run}", "dlq": f"dlq.outbox.{run}"}
    create_outbox_topics(cluster, requests=topics["requests"], receipts=topics["receipts"], dlq=topics["dlq"])
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
    with OutboxEmitter(cluster, topic=topics["requests"]) as emitter:
        for request in batch:
            emitter.emit(request)
    client = ConnectClient(connect_url)
    connector = sink_connector(run, cluster, receiver_url, topics, tasks, receipts_producer)
    started = time.perf_counter()
    client.put_connector_config(connector.name, connector.config)
    try:
        with ReceiptReader(cluster, topic=topics["receipts"]) as reader:
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


def sink_variants(tasks: list[int], receipts_producer: dict[str, str]) -> list[tuple[str, int, dict[str, str]]]:
    """(what, tasks.max, receipt-producer settings) of every sink run of a round."""
    variants: list[tuple[str, int, dict[str, str]]] = [
        (f"outbox sink, tasks.max={t} (3 partitions)", t, {}) for t in tasks
    ]
    if receipts_producer:
        settings = ", ".join(f"{k}={v}" for k, v in receipts_producer.items())
        variants.append((f"outbox sink, tasks.max={tasks[0]}, receipts {settings}", tasks[0], receipts_producer))
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="uncounted sink drains before the first round")
    parser.add_argument("--tasks", default="1,2,3", help="tasks.max of the sink runs, comma-separated")
    parser.add_argument(
        "--receipts-producer",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a receipt-producer setting for one more sink run (repeatable), e.g. linger.ms=5",
    )
    args = parser.parse_args()
    tasks = [int(t) for t in args.tasks.split(",")]
    producer = dict(setting.split("=", 1) for setting in args.receipts_producer)
    variants = sink_variants(tasks, producer)
    rows: list[list[object]] = []
    rates: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}

    def keep(round_: int, what: str, elapsed: float | None, rate: float, ceiling8: float | None) -> None:
        ratio = rate / ceiling8 if ceiling8 else None
        rows.append([round_, what, args.requests, elapsed, rate, ratio])
        rates.setdefault(what, []).append(rate)
        if ratio is not None:
            ratios.setdefault(what, []).append(ratio)

    with bench_stack("outbox") as (cluster, connect_url, scratch):
        receiver, url = start_receiver(scratch / "receiver.sqlite")
        try:
            for _ in range(args.warmup):
                sink_rate(cluster, connect_url, url, args.requests, tasks[0])
            for round_ in range(1, args.rounds + 1):
                ceiling1 = ceiling(url, args.requests, 1)
                keep(round_, "receiver ceiling, load generator, 1 connection(s)", None, ceiling1, None)
                ceiling8 = ceiling(url, args.requests, 8)
                keep(round_, "receiver ceiling, load generator, 8 connection(s)", None, ceiling8, ceiling8)
                for what, t, settings in variants:
                    rate, elapsed = sink_rate(cluster, connect_url, url, args.requests, t, settings)
                    keep(round_, what, elapsed, rate, ceiling8)
        finally:
            receiver.terminate()
            receiver.wait(10)
    print_table(
        "outbox sink vs the reference receiver's ceiling, by round",
        ["ROUND", "WHAT", "REQUESTS", "TO LAST RECEIPT S", "PER SECOND", "OF ROUND'S 8-CONNECTION CEILING"],
        rows,
    )
    print_table(
        f"medians over {args.rounds} round(s)",
        ["WHAT", "PER SECOND", "OF 8-CONNECTION CEILING"],
        [[what, median(rates[what]), median(ratios.get(what, []))] for what in rates],
    )


if __name__ == "__main__":
    main()

"""Measure the control plane: apply a bundle of N connectors to all-RUNNING, then the no-op re-apply.

    .venv/bin/python -m benchmarks.control_plane [--connectors 20,100] [--rounds 3]

Uses the cluster named by IKKAI_CONNECT_URL / IKKAI_BOOTSTRAP_SERVERS, else starts the embedded
stack in a temporary home (and stops it afterwards). The bundle is generated: N FileStreamSource
connectors, each with its own drop file and ingest topic (created by Connect's topic.creation).
Prints a table; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from benchmarks.harness import bench_stack, print_table
from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest
from deploy.connect_rest import ConnectClient

TEMPLATE = """{
  "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
  "tasks.max": "1",
  "file": {{ (drop ~ "/" ~ connector ~ ".jsonl") | tojson }},
  "topic": {{ ("ingest.bench." ~ run ~ "." ~ connector) | tojson }},
  "transforms": "businessKey",
  "transforms.businessKey.type": "dev.ikkai.connect.transforms.JsonFieldToKey",
  "transforms.businessKey.field": "payment_id",
  "exactly.once.support": {{ exactly_once | tojson }},
  "producer.override.enable.idempotence": {{ producer.enable_idempotence | tojson }},
  "producer.override.acks": {{ producer.acks | tojson }},
  "topic.creation.default.replication.factor": -1,
  "topic.creation.default.partitions": 1
}
"""


def write_bundle(root: Path, connectors: int, run: str) -> Path:
    folder = root / "bench-bundle"
    (folder / "templates").mkdir(parents=True)
    (folder / "values").mkdir()
    drop = root / "drop"
    drop.mkdir()
    names = [f"c{i:03d}" for i in range(connectors)]
    for name in names:
        (drop / f"{name}.jsonl").touch()
    manifest = {
        "name": "bench",
        "owner_prefix": f"bench-{run}.",
        "connectors": [{"name": n, "template": "templates/source.json.j2"} for n in names],
    }
    (folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    (folder / "templates" / "source.json.j2").write_text(TEMPLATE)
    (folder / "values" / "bench.yaml").write_text(yaml.safe_dump({"drop": str(drop), "run": run}))
    return folder


def measure(connect_url: str, connectors: int, rounds: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for round_ in range(rounds):
        run = uuid.uuid4().hex[:6]
        with tempfile.TemporaryDirectory() as tmp:
            request = BundleRequest(str(write_bundle(Path(tmp), connectors, run)), "bench", connect_url=connect_url)
            client = ConnectClient(connect_url)
            started = time.perf_counter()
            result = bundle_ops.apply_data(request, client=client)
            apply_s = time.perf_counter() - started
            assert set(result["states"].values()) == {"RUNNING"} and len(result["states"]) == connectors
            rows.append([f"apply {connectors} connectors", round_ + 1, apply_s, len(client.calls), len(client.writes)])
            noop = ConnectClient(connect_url)
            started = time.perf_counter()
            bundle_ops.apply_data(request, client=noop)
            noop_s = time.perf_counter() - started
            rows.append([f"no-op re-apply of {connectors}", round_ + 1, noop_s, len(noop.calls), len(noop.writes)])
            for name in client.connectors():
                if name.startswith(f"bench-{run}."):
                    client.delete_connector(name)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connectors", default="20,100", help="bundle sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: list[list[object]] = []
    with bench_stack("control-plane") as (_, connect_url, _):
        for connectors in (int(n) for n in args.connectors.split(",")):
            rows += measure(connect_url, connectors, args.rounds)
    headers = ["MEASUREMENT", "ROUND", "SECONDS", "HTTP CALLS", "WRITES"]
    print_table("control plane (one embedded Connect worker)", headers, rows)
    medians = [
        [label, statistics.median(float(str(r[2])) for r in rows if r[0] == label)]
        for label in dict.fromkeys(str(r[0]) for r in rows)
    ]
    print_table("medians", ["MEASUREMENT", "SECONDS"], medians)


if __name__ == "__main__":
    main()

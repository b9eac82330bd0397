"""What the demo runs, as data: the commands of its processes and the bundle requests it applies. Pure.

Live jobs run continuously in bounded micro-batches (so a kill lands mid-stream); replays run
until their input is drained, each with its own query name (hence its own transactional.ids)
and a fresh checkpoint.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from demo.facts import replay_topic
from deploy.bundle_ops import BundleRequest
from ikkai.contract.topics import (
    DECISIONS_FRAUD,
    DLQ_ENRICH,
    DLQ_INFER,
    EVENTS_PAYMENTS,
    INGEST_PAYMENTS,
    OUTBOX_REQUESTS,
)


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@dataclass(frozen=True)
class Lineup:
    run_dir: Path
    bootstrap_servers: str
    connect_url: str
    partitions: int
    batch: int  # records per micro-batch of the live jobs

    @property
    def drop_file(self) -> Path:
        return self.run_dir / "drop" / "payments.jsonl"

    def log(self, name: str) -> Path:
        return self.run_dir / "logs" / f"{name}.log"

    def _job(self, module: str, query: str, continuous: bool, *args: str) -> list[str]:
        command = python_module(
            module, "--bootstrap", self.bootstrap_servers, "--checkpoint", str(self.run_dir / "checkpoints" / query),
            "--partitions", str(self.partitions), "--query", query, *args,
        )  # fmt: skip
        return command + (["--continuous", "--max-offsets-per-trigger", str(self.batch)] if continuous else [])

    def enrich(self, *, replay: bool = False) -> tuple[str, list[str]]:
        """(name, command): ingest.payments → events.payments + dlq.enrich (or their .replay twins)."""
        name = "enrich-replay" if replay else "enrich"
        out = replay_topic if replay else str
        return name, self._job(
            "spark_jobs.enrich", name, not replay, "--input", INGEST_PAYMENTS, "--output", out(EVENTS_PAYMENTS),
            "--dlq", out(DLQ_ENRICH),
        )  # fmt: skip

    def infer(self, *, replay: bool = False) -> tuple[str, list[str]]:
        """(name, command): events.payments → decisions.fraud + outbox.requests (or their .replay twins).

        A replay reads the same input again: a decision names its input topic, so reading
        events.payments.replay would change every decision's bytes. That enrich's replay
        reproduces events.payments byte for byte is compared on its own.
        """
        name = "infer-replay" if replay else "infer"
        out = replay_topic if replay else str
        return name, self._job(
            "spark_jobs.infer", name, not replay, "--input", EVENTS_PAYMENTS, "--decisions", out(DECISIONS_FRAUD),
            "--outbox", out(OUTBOX_REQUESTS), "--dlq", out(DLQ_INFER),
        )  # fmt: skip

    def receiver(self, port: int) -> list[str]:
        return python_module("demo.receiver", "--db", str(self.run_dir / "receiver.sqlite"), "--port", str(port))

    def bundles(self, receiver_url: str) -> list[BundleRequest]:
        """payments-ingest reading the drop file; outbox-sink delivering to the receiver (both APIs)."""
        drop = self.drop_file.parent
        ingest = BundleRequest("payments-ingest", "dev", connect_url=self.connect_url, overrides=(
            f"sources.payments.file={drop / 'payments.jsonl'}", f"sources.refunds.file={drop / 'refunds.jsonl'}",
            f"partitions={self.partitions}",
        ))  # fmt: skip
        outbox = BundleRequest("outbox-sink", "dev", connect_url=self.connect_url, overrides=(
            f"kafka.bootstrap_servers={self.bootstrap_servers}",
            f"targets.payments-api.url={receiver_url}", f"targets.notifications-api.url={receiver_url}",
        ))  # fmt: skip
        return [ingest, outbox]

"""What the demo runs, as data: the commands of its processes and the bundle requests it applies. Pure.

Live jobs run continuously in bounded micro-batches (so a kill lands mid-stream); replays run
until their input is drained, each with its own query name (hence its own transactional.ids)
and a fresh checkpoint. On ``local[2]`` a replay is a second query of its live job, asked for by
a request in the job's replay folder (``replay_request``, ``spark_jobs.replay_query``): the same
session, no new driver.

On a stack with a Spark standalone cluster (``ikkai demo --spark-workers N``) the live jobs go to
its master through ``ikkai jobs run <job> --master spark://…`` (spark-submit, the application zip),
their checkpoints in the folder every process of the cluster shares; the replays stay on
``local[2]``, so the replay's digests compare the cluster's output with another runtime's.
The replay's process commands (``enrich(replay=True)``, ``infer(replay=True)``) serve the cluster.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from demo.facts import REPLAY_SUFFIX, replay_topic
from deploy.bundle_ops import BundleRequest
from ikkai.contract.topics import (
    DECISIONS_FRAUD,
    DLQ_ENRICH,
    DLQ_INFER,
    EVENTS_PAYMENTS,
    INGEST_PAYMENTS,
    OUTBOX_REQUESTS,
)

IKKAI = Path(sys.executable).parent / "ikkai"  # the console script beside this interpreter (pip install -e .)
JOB_NAMES = {"spark_jobs.enrich": "enrich", "spark_jobs.infer": "infer"}  # `ikkai jobs run` names them so
# Spark settings of the live jobs on the cluster (a spark-defaults.conf that spark-submit reads, SPARK_CONF_DIR): a
# standalone application takes every free core by default, so the first job would leave the other none.
CLUSTER_JOB_SETTINGS = {"spark.cores.max": "1"}


def spark_defaults(settings: dict[str, str]) -> str:
    """``settings`` as a spark-defaults.conf."""
    return "".join(f"{key} {value}\n" for key, value in settings.items())


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@dataclass(frozen=True)
class ReplayRequestPlace:
    folder: Path  # the live job's --replay-requests
    query: str
    checkpoint: Path
    suffix: str


@dataclass(frozen=True)
class Lineup:
    run_dir: Path
    bootstrap_servers: str
    connect_url: str
    partitions: int
    batch: int  # records per micro-batch of the live jobs
    # The stack's Spark standalone master and the folder all its processes share (stack.spark_cluster.shared_dir):
    # the live jobs run there. None: every job on local[2], its checkpoint under the run folder.
    master: str | None = None
    shared: Path | None = None

    def __post_init__(self) -> None:
        if (self.master is None) != (self.shared is None):
            raise ValueError("a Spark master and the folder its processes share go together")

    @property
    def drop_file(self) -> Path:
        return self.run_dir / "drop" / "payments.jsonl"

    @property
    def replays_in_job(self) -> bool:
        """A replay is a second query of its live job (local[2]); on a cluster, a process of its own."""
        return self.master is None

    def replay_request(self, name: str) -> ReplayRequestPlace:
        """Where the live job ``name`` takes replay requests, and the replay's query, checkpoint and suffix."""
        query = f"{name}-replay"
        return ReplayRequestPlace(self.run_dir / "replay-requests" / name, query, self.run_dir / "checkpoints" / query,
                                  REPLAY_SUFFIX)  # fmt: skip

    def log(self, name: str) -> Path:
        return self.run_dir / "logs" / f"{name}.log"

    def _job(self, module: str, query: str, continuous: bool, *args: str) -> list[str]:
        on_cluster = continuous and self.master is not None  # the replays stay on local[2]
        checkpoints = (self.shared or self.run_dir) if on_cluster else self.run_dir / "checkpoints"
        job_args = [
            "--bootstrap", self.bootstrap_servers, "--checkpoint", str(checkpoints / query), "--partitions",
            str(self.partitions), "--query", query, *args,
        ]  # fmt: skip
        if continuous:
            job_args += ["--continuous", "--max-offsets-per-trigger", str(self.batch)]
        if continuous and self.replays_in_job:
            job_args += ["--replay-requests", str(self.replay_request(JOB_NAMES[module]).folder)]
        if on_cluster:
            return [str(IKKAI), "jobs", "run", JOB_NAMES[module], "--master", str(self.master), *job_args]
        return python_module(module, *job_args)

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

    def bundles(self, receiver_url: str, clusters: Path | None = None) -> list[BundleRequest]:
        """payments-ingest reading the drop file; outbox-sink delivering to the receiver (both APIs). ``clusters``:
        a clusters file that names the demo's stack for ``dev`` (the page's), so the record of each apply goes to
        the demo's Kafka, not to the default embedded stack's."""
        drop = self.drop_file.parent
        ingest = BundleRequest("payments-ingest", "dev", connect_url=self.connect_url, clusters=clusters, overrides=(
            f"sources.payments.file={drop / 'payments.jsonl'}", f"sources.refunds.file={drop / 'refunds.jsonl'}",
            f"partitions={self.partitions}",
        ))  # fmt: skip
        outbox = BundleRequest("outbox-sink", "dev", connect_url=self.connect_url, clusters=clusters, overrides=(
            f"kafka.bootstrap_servers={self.bootstrap_servers}",
            f"targets.payments-api.url={receiver_url}", f"targets.notifications-api.url={receiver_url}",
        ))  # fmt: skip
        return [ingest, outbox]

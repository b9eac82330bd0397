"""Run the enrich job as its own process (``python -m spark_jobs.enrich``) and kill it with SIGKILL.

The process handling (own process group, stderr reader, batch counting, kill, tail) is the infer
job's ``InferProcess``; only the command differs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from demo.infer_process import InferProcess, job_environment
from ikkai.contract.kafka import KafkaContext


@dataclass(frozen=True)
class EnrichTopics:
    input: str
    events: str
    dlq: str
    merchants: str
    customers: str


class EnrichProcess(InferProcess):
    def __init__(self, cluster: KafkaContext, topics: EnrichTopics, checkpoint: Path, query: str, *extra: str) -> None:
        command = [
            sys.executable, "-m", "spark_jobs.enrich", "--bootstrap", cluster.bootstrap_servers,
            "--checkpoint", str(checkpoint), "--query", query, "--input", topics.input, "--output", topics.events,
            "--dlq", topics.dlq, "--merchants", topics.merchants, "--customers", topics.customers, *extra,
        ]  # fmt: skip
        self._start(command, job_environment(cluster))

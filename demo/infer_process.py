"""Run the infer job as its own process through ``ikkai jobs run infer``, and kill it with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from ikkai.settings import KAFKA_CONFIG_VAR

IKKAI = Path(sys.executable).parent / "ikkai"  # `ikkai jobs run infer` execs the job: its pid is the job's


@dataclass(frozen=True)
class InferTopics:
    input: str
    decisions: str
    outbox: str
    dlq: str


def job_environment(cluster: KafkaContext) -> dict[str, str]:
    """What a job process started on ``cluster`` needs in its environment to reach it as its starter does: the
    client file its settings were read from (``IKKAI_KAFKA_CONFIG``); nothing for a cluster read from no file, whose
    process inherits ours."""
    if cluster.security.file:
        return {KAFKA_CONFIG_VAR: cluster.security.file}
    if cluster.security.properties:
        raise ConfigError(
            "job process", "cluster", f"{cluster.describe()} has client settings built in memory, not read from a file",
            fix="build the KafkaContext from a client-properties file (KafkaContext.at or .from_environment): "
            "a job process reads its settings from the file IKKAI_KAFKA_CONFIG names",
        )  # fmt: skip
    return {}


class InferProcess:
    """One job process in its own process group (driver, JVM and Python workers die together)."""

    def __init__(self, cluster: KafkaContext, topics: InferTopics, checkpoint: Path, query: str, *extra: str) -> None:
        command = [
            str(IKKAI), "jobs", "run", "infer", "--bootstrap", cluster.bootstrap_servers,
            "--checkpoint", str(checkpoint), "--query", query, "--input", topics.input,
            "--decisions", topics.decisions, "--outbox", topics.outbox, "--dlq", topics.dlq, *extra,
        ]  # fmt: skip
        self._start(command, job_environment(cluster))

    def _start(self, command: list[str], env: Mapping[str, str] | None = None) -> None:
        """Start ``command`` in its own process group (``env`` added to ours) and read its stderr in the background."""
        self.log: list[str] = []
        self.committed = threading.Semaphore(0)
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            if ": batch " in line:
                self.committed.release()

    def wait_for_batches(self, count: int, timeout: float = 300) -> bool:
        """True once ``count`` more batches were written; False if the process ended first."""
        for _ in range(count):
            while not self.committed.acquire(timeout=1):
                if self.process.poll() is not None or timeout <= 0:
                    return False
                timeout -= 1
        return True

    def kill(self) -> None:
        """SIGKILL to the whole job (its own process group, started above), then reap it."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(60)
        self._reader.join(10)

    def wait(self, timeout: float = 600) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code

    def tail(self, lines: int = 30) -> str:
        return "".join(self.log[-lines:])

"""The processes the demo starts besides the stack: the reference receiver and the Spark jobs.

Each runs as its own process in its own process group (so SIGKILL takes the driver, its JVM and
its Python workers at once), with stdout and stderr in one log file under the run folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from ikkai.errors import IkkaiError

CLUSTER_VARS = ("IKKAI_BOOTSTRAP_SERVERS", "IKKAI_CONNECT_URL")


class DemoProcessError(IkkaiError):
    """A process the demo started did not come up, or ended when it should not have."""

    def __init__(self, name: str, problem: str, log: Path) -> None:
        super().__init__(f"{name}: {problem}", fix=f"see its log: {log}")
        self.name = name
        self.log = log


class Child:
    """One long-running process of the demo: started, signalled and reaped here."""

    def __init__(self, name: str, command: Sequence[str], log: Path, env: Mapping[str, str]) -> None:
        self.name = name
        self.command = list(command)
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = log.open("ab")
        self._log_start = self._log_file.tell()  # where this run's output begins (the log is shared by restarts)
        self._log_file.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(self.command)}\n".encode())
        self._log_file.flush()
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            start_new_session=True, env=dict(env),
        )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise DemoProcessError(self.name, f"exited with code {self.process.returncode}", self.log)

    def kill(self) -> None:
        """SIGKILL to the whole process group, then reap."""
        self._signal(signal.SIGKILL)
        self.process.wait(60)
        self._log_file.close()

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM to the group, SIGKILL after ``grace_s``; the exit code."""
        if self.alive():
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(30)
        self._signal(signal.SIGKILL)  # stragglers of the group (PySpark's daemon workers)
        self._log_file.close()
        return self.process.returncode

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired as exc:
            self.kill()
            raise DemoProcessError(self.name, f"still running after {timeout_s:.0f}s; killed", self.log) from exc
        finally:
            self._log_file.close()

    def wait_for_output(self, needle: str, timeout_s: float, since: int = 0) -> bool:
        """Until this process writes ``needle`` to its log (past offset ``since``, ``log_size``); False when it
        exits or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.alive():
            if self.has_written(needle, since):
                return True
            time.sleep(0.5)
        return False

    def quiet_for(self) -> float:
        """Seconds since this process last wrote to its log (a Spark job's stage progress counts)."""
        return max(0.0, time.time() - self.log.stat().st_mtime)

    def has_written(self, needle: str, since: int = 0) -> bool:
        """Whether this run of the process has written ``needle`` to its log so far (past offset ``since``)."""
        return needle.encode() in self.log.read_bytes()[max(self._log_start, since) :]

    def log_size(self) -> int:
        """Where its log ends now: ``since`` for output that comes after this moment."""
        return self.log.stat().st_size

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


def child_env(home: Path, jars: Path) -> dict[str, str]:
    """The demo's environment for children: its own home, the caller's jars, never an external cluster.

    The jars are named explicitly: they live under the caller's home (``$IKKAI_HOME/jars``), not the demo's.
    """
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    env["IKKAI_HOME"] = str(home)
    env["IKKAI_JARS_DIR"] = str(jars)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_for_http(child: Child, url: str, timeout_s: float = 60.0) -> None:
    """Until ``url`` answers 200 (the child is up); fails at once if the child exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        child.check_alive()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own loopback URL
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise DemoProcessError(child.name, f"{url} did not answer within {timeout_s:.0f}s", child.log)


def get_json(url: str, timeout_s: float = 30.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - our own loopback URL
        return json.loads(response.read())

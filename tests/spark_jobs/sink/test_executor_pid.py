"""A Python worker finds its executor: the nearest ``java`` ancestor (the writer socket's name and the writer's life
follow that JVM), else its parent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_jobs.sink.executor_writer_client import executor_pid

ASK = "from spark_jobs.sink.executor_writer_client import executor_pid; print(executor_pid())"
ROOT = Path(__file__).resolve().parents[3]

# A JVM that starts a shell that starts Python, as an executor starts pyspark's daemon, which forks the worker.
LAUNCHER = """
public class Launcher {
    public static void main(String[] args) throws Exception {
        Process child = new ProcessBuilder(args).inheritIO().start();
        System.out.println("jvm " + ProcessHandle.current().pid());
        System.out.flush();
        System.exit(child.waitFor());
    }
}
"""


def test_a_worker_under_a_jvm_names_the_jvm(tmp_path: Path) -> None:
    source = tmp_path / "Launcher.java"
    source.write_text(LAUNCHER)
    shell = f"{sys.executable} -c '{ASK}'; true"  # the shell stays between: the JVM is a grandparent
    run = subprocess.run(["java", str(source), "sh", "-c", shell], capture_output=True, text=True, cwd=ROOT,
                         env=os.environ | {"PYTHONPATH": str(ROOT)}, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split()
    jvm = lines[lines.index("jvm") + 1]
    found = [line for line in run.stdout.splitlines() if line.isdigit()]
    assert found == [jvm], run.stdout


def test_a_worker_without_a_jvm_above_it_names_its_parent() -> None:
    run = subprocess.run([sys.executable, "-c", ASK], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) == os.getpid()
    assert executor_pid() != os.getpid()

"""What ``ikkai demo --keep`` leaves running against a stack is stopped by ``ikkai stack down``, and a pid
reused by a stranger is never signalled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ikkai.settings import jars_dir
from stack import attached, processes
from stack.local_stack import LocalStack

NEVER_ENDING = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]


def test_stack_down_stops_the_processes_attached_to_it_and_forgets_them(tmp_path: Path) -> None:
    job = subprocess.Popen(NEVER_ENDING, start_new_session=True)  # a kept job: its own process group, as the demo's
    receiver = subprocess.Popen(NEVER_ENDING, start_new_session=True)
    try:
        attached.attach(tmp_path, "infer", job.pid)
        attached.attach(tmp_path, "receiver", receiver.pid)
        LocalStack(tmp_path, jars_dir()).down()
        assert job.wait(30) is not None and receiver.wait(30) is not None
        assert not (tmp_path / attached.ATTACHED_FILE).exists()
    finally:
        for process in (job, receiver):
            process.kill()
            process.wait()


def test_a_pid_that_is_not_the_recorded_process_is_left_alone(tmp_path: Path) -> None:
    stranger = subprocess.Popen(NEVER_ENDING, start_new_session=True)
    try:
        attached.attach(tmp_path, "infer", stranger.pid)
        record = json.loads((tmp_path / attached.ATTACHED_FILE).read_text())
        record["infer"]["started"] -= 5  # ours started earlier: this pid was reused by another process
        (tmp_path / attached.ATTACHED_FILE).write_text(json.dumps(record))
        assert attached.stop_attached(tmp_path, grace_seconds=1) == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_group_that_ignores_term_is_killed_after_the_grace_and_named() -> None:
    ignores = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
    stubborn = subprocess.Popen([sys.executable, "-c", ignores + "while True: time.sleep(1)"],
                                start_new_session=True, stdout=subprocess.PIPE)  # fmt: skip
    polite = subprocess.Popen(NEVER_ENDING, start_new_session=True)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"  # its handler is set
        killed = processes.stop_groups([stubborn.pid, polite.pid], grace_seconds=1)
        assert killed == [stubborn.pid]
        assert processes.has_exited(stubborn.pid) and processes.has_exited(polite.pid)  # (reaped there already)
    finally:
        for process in (stubborn, polite):
            process.kill()
            process.wait()

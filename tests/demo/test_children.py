"""A demo child's silence is measured from its log, so a working job is told apart from a stuck one."""

from __future__ import annotations

import os
import time
from pathlib import Path

from demo.children import Child


def test_a_child_that_keeps_writing_is_not_quiet_and_one_that_stopped_is(tmp_path: Path) -> None:
    env = dict(os.environ)
    busy = Child("busy", ["sh", "-c", "while true; do echo stage; sleep 0.2; done"], tmp_path / "busy.log", env)
    silent = Child("silent", ["sh", "-c", "echo started; sleep 30"], tmp_path / "silent.log", env)
    try:
        time.sleep(2.5)
        assert busy.quiet_for() < 1.5
        assert silent.quiet_for() > 1.5
    finally:
        busy.kill()
        silent.kill()


def test_output_is_looked_for_past_a_mark_so_a_batch_before_a_kill_does_not_count_after_it(tmp_path: Path) -> None:
    """An executor kill leaves the job's driver running: its recovery is the next batch line, not one from before."""
    job = Child("infer", ["sh", "-c", "echo 'infer: batch 3 committed 40 records'"], tmp_path / "infer.log",
                dict(os.environ))  # fmt: skip
    job.wait(30)
    mark = job.log_size()
    assert job.has_written("infer: batch")
    assert not job.has_written("infer: batch", since=mark)
    with job.log.open("ab") as log:  # the driver's next line, after the mark
        log.write(b"infer: batch 4 committed 12 records\n")
    assert job.has_written("infer: batch 4", since=mark) and not job.has_written("infer: batch 3", since=mark)

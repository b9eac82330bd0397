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

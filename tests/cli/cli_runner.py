"""Run the real ``ikkai`` console script in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IKKAI = Path(sys.executable).parent / "ikkai"  # installed by `pip install -e .` (make setup) from pyproject's scripts


def run_ikkai(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")}
    environment.update(env or {})
    return subprocess.run(
        [str(IKKAI), *args],
        capture_output=True, text=True, timeout=timeout, env=environment, cwd=ROOT, check=False,
    )  # fmt: skip

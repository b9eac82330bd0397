"""The local schema registry for tests: one per module that asks, in its own home, always stopped.

It listens on a free port, or on ``IKKAI_TEST_REGISTRY_PORT`` where a machine hands ports out.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ikkai.errors import IkkaiError
from ikkai.settings import jars_dir
from stack.processes import stack_processes
from stack.schema_registry import REGISTRY, LocalSchemaRegistry

PORT_VAR = "IKKAI_TEST_REGISTRY_PORT"


@contextmanager
def running_registry(home: Path) -> Iterator[LocalSchemaRegistry]:
    """A started registry in ``home``; skips (which CI counts as a failure) if it cannot start here."""
    port = os.environ.get(PORT_VAR)
    registry = LocalSchemaRegistry(home, jars_dir(), port=int(port) if port else None, progress=sys.stderr)
    try:
        registry.up()
    except IkkaiError as exc:
        registry.down()
        pytest.skip(f"the schema registry cannot start here: {exc}")
    try:
        yield registry
    finally:
        registry.down()
        for pid in stack_processes(home.resolve()).get(REGISTRY, []):  # never leak a JVM
            os.kill(pid, signal.SIGKILL)

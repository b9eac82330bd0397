"""The local schema registry for tests: one per module that asks, in its own home, always stopped."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deploy.processes import stack_processes
from deploy.schema_registry import REGISTRY, LocalSchemaRegistry
from ikkai.errors import IkkaiError
from ikkai.settings import jars_dir


@contextmanager
def running_registry(home: Path) -> Iterator[LocalSchemaRegistry]:
    """A started registry in ``home``; skips (which CI counts as a failure) if it cannot start here."""
    registry = LocalSchemaRegistry(home, jars_dir(), progress=sys.stderr)
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

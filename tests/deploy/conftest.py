"""Fixtures of the deploy tests: the CRD schemas cluster exports are validated against."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ikkai.settings import Endpoints, jars_dir
from stack.local_stack import LocalStack
from stack.shape import StackOptions
from stack.stack_security import StackSecrets
from tests.conftest import connectors_removed
from tests.deploy.crd_schemas import NoSuitableJava, strimzi_crds


@pytest.fixture(scope="session")
def strimzi(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Kind → CRD of the Strimzi release in crd_schemas.STRIMZI_VERSION, generated once and cached."""
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("ikkai-crds") if cache is not None else tmp_path_factory.mktemp("crds")
    try:
        return strimzi_crds(Path(folder))
    except NoSuitableJava as exc:
        pytest.skip(f"Strimzi's CRD generator needs Java 21+: {exc}")


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Endpoints, StackSecrets]]:
    """A secured embedded stack for the module (``IKKAI_TEST_SECURE_HOME`` names a running one to reuse)."""
    reuse = os.environ.get("IKKAI_TEST_SECURE_HOME")
    home = Path(reuse) if reuse else tmp_path_factory.mktemp("secure") / "home"
    local = LocalStack(home, jars_dir(), StackOptions(secure=True), heap="512m", progress=sys.stderr)
    endpoints = local.up()
    secrets = local.stack_secrets()
    assert secrets is not None
    try:
        yield endpoints, secrets
    finally:
        if not reuse:
            local.down(purge=True)


@pytest.fixture(scope="module")
def own_stack(killable_stack: tuple[LocalStack, Endpoints]) -> Iterator[tuple[LocalStack, Endpoints]]:
    """The session's stack for tests that kill its components (``killable_stack``), for one module; its
    connectors are removed afterwards."""
    try:
        yield killable_stack
    finally:
        connectors_removed(killable_stack[1].connect_url)

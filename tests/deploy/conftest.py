"""Fixtures of the deploy tests: the CRD schemas cluster exports are validated against."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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

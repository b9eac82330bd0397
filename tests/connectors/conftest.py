"""Factory fixtures for bundles written into a temporary folder."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"

BundleFactory = Callable[..., Path]


@pytest.fixture
def make_bundle(tmp_path: Path) -> BundleFactory:
    """Write a bundle: manifest dict, {template path: text}, {env: values dict}."""

    def make(manifest: dict[str, object], templates: dict[str, str], values: dict[str, dict[str, object]]) -> Path:
        folder = tmp_path / str(manifest.get("name", "bundle"))
        (folder / "values").mkdir(parents=True)
        (folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
        for path, text in templates.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(text)
        for env, data in values.items():
            (folder / "values" / f"{env}.yaml").write_text(yaml.safe_dump(data))
        return folder

    return make


@pytest.fixture
def shipped_bundle(tmp_path: Path) -> Callable[[str, str], Path]:
    """A copy of a shipped bundle with its own owner prefix, so tests never touch each other's connectors."""

    def copy(name: str, owner_prefix: str) -> Path:
        folder = tmp_path / "bundles" / name
        shutil.copytree(SHIPPED / name, folder)
        manifest = yaml.safe_load((folder / "bundle.yaml").read_text())
        manifest["owner_prefix"] = owner_prefix
        (folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
        return folder

    return copy

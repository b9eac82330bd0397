"""Every shipped bundle renders and lints clean for each of its environments, a new one included."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.lint import lint_bundle, require_clean
from connectors.render import load_bundle, render_bundle
from tests.connectors.conftest import SHIPPED

# Values a bundle can only be given at deploy time (its values file says so); any bundle may use them,
# and those whose templates read them get them (a --set no template uses is an error).
DEPLOY_TIME = {"kafka.bootstrap_servers": "broker-1:9092"}


def deploy_time_sets(folder: Path) -> tuple[str, ...]:
    templates = "".join(p.read_text() for p in (folder / "templates").glob("*.j2"))
    return tuple(f"{key}={value}" for key, value in DEPLOY_TIME.items() if key in templates)


def shipped_environments() -> list[tuple[str, str]]:
    found = [
        (folder.name, values.stem)
        for folder in sorted(SHIPPED.iterdir())
        if (folder / "bundle.yaml").is_file()
        for values in sorted((folder / "values").glob("*.yaml"))
    ]
    assert found, f"no bundles found in {SHIPPED}"
    return found


def test_every_bundle_folder_is_a_bundle() -> None:
    """A folder without bundle.yaml would be skipped by the test below: it is a mistake, not an option."""
    assert [f.name for f in SHIPPED.iterdir() if f.is_dir() and not (f / "bundle.yaml").is_file()] == []


@pytest.mark.parametrize(("name", "env"), shipped_environments())
def test_shipped_bundle_renders_and_lints_clean(name: str, env: str) -> None:
    rendered = render_bundle(load_bundle(SHIPPED / name), env, deploy_time_sets(SHIPPED / name))
    assert rendered.connectors, f"{name}/{env} renders no connector"
    require_clean(rendered, lint_bundle(rendered))  # raises PolicyViolation naming connector, check and fix


def test_the_list_covers_what_the_platform_ships() -> None:
    shipped = {name for name, _ in shipped_environments()}
    assert {"payments-ingest", "outbox-sink", "postgres-cdc"} <= shipped

"""docs/adding-a-connector-bundle.md, followed literally: its files, then its commands, through the real CLI."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from ikkai.settings import Endpoints
from stack.kit.topic_io import unique
from tests.cli.cli_runner import IKKAI
from tests.docs.guide import Guide, read_guide

GUIDE = "adding-a-connector-bundle.md"
WRITTEN_AS = "connectors/bundles/merchant-feed"  # where the guide puts the bundle; the test uses a temporary folder


def write_bundle(guide: Guide, folder: Path) -> Path:
    for name, text in guide.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def run(
    command: list[str], bundle: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert command[0] == "ikkai", f"the guide runs {command[0]!r}, not ikkai"
    args = [str(bundle) if arg == WRITTEN_AS else arg for arg in command[1:]]
    return subprocess.run(
        [str(IKKAI), *args, *extra], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def test_the_guide_bundle_renders_and_lints_clean_offline(tmp_path: Path) -> None:
    guide = read_guide(GUIDE)
    assert set(guide.files) == {"bundle.yaml", "templates/source.json.j2", "values/dev.yaml", "values/prod.yaml"}
    bundle = write_bundle(guide, tmp_path / "merchant-feed")
    for command in guide.runs["offline"]:
        result = run(command, bundle)
        assert result.returncode == 0, f"{' '.join(command)}: {result.stderr}"
    rendered = run(["ikkai", "bundle", "render", WRITTEN_AS, "--env", "prod", "-o", "json"], bundle)
    assert '"ingest.merchants"' in rendered.stdout and "JsonFieldToKey" in rendered.stdout
    assert '"12"' in rendered.stdout  # prod's partitions reached the config


def test_what_the_guide_says_about_an_undefined_variable_is_what_happens(tmp_path: Path) -> None:
    bundle = write_bundle(read_guide(GUIDE), tmp_path / "merchant-feed")
    (bundle / "values" / "dev.yaml").write_text("{}\n")
    result = run(["ikkai", "bundle", "render", WRITTEN_AS, "--env", "dev"], bundle)
    assert result.returncode == 1
    assert "templates/source.json.j2 line 4: undefined variable 'file'" in result.stderr


def test_a_literal_secret_in_the_guide_bundle_fails_the_lint(tmp_path: Path) -> None:
    bundle = write_bundle(read_guide(GUIDE), tmp_path / "merchant-feed")
    template = bundle / "templates" / "source.json.j2"
    template.write_text(
        template.read_text().replace('"errors.tolerance"', '"database.password": "hunter2",\n  "errors.tolerance"')
    )
    result = run(["ikkai", "bundle", "lint", WRITTEN_AS, "--env", "dev", "--offline"], bundle)
    assert result.returncode == 1 and "database.password" in result.stderr + result.stdout


@pytest.mark.integration
def test_the_guide_bundle_lands_a_line_keyed_by_its_merchant_id(stack: Endpoints, tmp_path: Path) -> None:
    guide = read_guide(GUIDE)
    bundle = write_bundle(guide, tmp_path / "merchant-feed")
    prefix = unique("merchant-feed").replace(".", "-") + "."
    manifest = bundle / "bundle.yaml"
    manifest.write_text(manifest.read_text().replace("owner_prefix: merchant-feed.", f"owner_prefix: {prefix}"))
    drop = tmp_path / "merchants.jsonl"
    drop.write_text("")
    bootstrap = stack.bootstrap_servers
    env = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")}
    env |= {"IKKAI_BOOTSTRAP_SERVERS": bootstrap, "IKKAI_CONNECT_URL": stack.connect_url}
    sets = ("--set", f"file={drop}")  # the dev values' drop file, moved into this test's folder
    try:
        for command in guide.runs["cluster"]:
            result = run(command, bundle, *sets, env=env)
            expected = (0, 2) if command[2] == "plan" else (0,)  # plan: exit 2 = changes pending
            assert result.returncode in expected, f"{' '.join(command)}: {result.stderr}"
        line = '{"merchant_id": "m-001", "name": "Corner Shop"}'
        assert f"echo '{line}' >>" in (Path(__file__).resolve().parents[2] / "docs" / GUIDE).read_text()
        with drop.open("a") as out:
            out.write(line + "\n")
        assert (b"m-001", line.encode()) in landed(bootstrap, "ingest.merchants", line.encode())
    finally:
        for command in guide.runs["teardown"]:
            result = run(command, bundle, *sets, env=env)
            assert result.returncode == 0, result.stderr


def landed(bootstrap: str, topic: str, value: bytes, timeout: float = 90) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of the records of ``topic`` (read_committed) once ``value`` is among them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("guide"), "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe([topic])
    seen: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and value not in [v for _, v in seen]:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                seen.append((message.key(), message.value()))
    finally:
        consumer.close()
    return seen

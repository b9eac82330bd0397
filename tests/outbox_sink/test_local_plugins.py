"""The plugin build is keyed by a fingerprint of exactly the sources that go into it."""

from __future__ import annotations

from pathlib import Path

import pytest

import deploy.local_plugins as lp
from deploy.local_plugins import COMPLETE, LocalPlugin, built_plugin_dirs, fingerprint, plugin_path_entry


def plugin(tmp_path: Path) -> LocalPlugin:
    module = tmp_path / "connector"
    (module / "src" / "main").mkdir(parents=True)
    (module / "pom.xml").write_text("<project/>")
    (module / "src" / "main" / "A.java").write_text("class A {}")
    schemas = tmp_path / "schemas" / "outbox_request"
    schemas.mkdir(parents=True)
    (schemas / "v1.avsc").write_text("{}")
    return LocalPlugin("p", module, (schemas,))


def test_fingerprint_changes_with_any_source_and_ignores_build_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lp, "REPO", tmp_path)
    p = plugin(tmp_path)
    before = fingerprint(p)
    (p.module / "target").mkdir()
    (p.module / "target" / "x.jar").write_text("built")
    assert fingerprint(p) == before
    (p.inputs[0] / "v1.avsc").write_text('{"type": "string"}')
    after_schema = fingerprint(p)
    assert after_schema != before
    (p.module / "src" / "main" / "A.java").write_text("class A { int x; }")
    assert fingerprint(p) not in {before, after_schema}


def test_only_complete_builds_of_the_current_sources_are_used(tmp_path: Path) -> None:
    entry = plugin_path_entry(tmp_path, lp.OUTBOX_SINK)
    entry.mkdir(parents=True)
    assert built_plugin_dirs(tmp_path) == []
    (entry / COMPLETE).write_text("")
    assert built_plugin_dirs(tmp_path) == [entry]


@pytest.mark.integration  # runs Maven and the JUnit tests (no stack)
def test_the_outbox_plugin_builds_into_a_folder_with_only_what_the_worker_lacks(tmp_path: Path) -> None:
    """A real Maven build (JUnit tests included) into an empty jars folder, as on a clean clone."""
    [entry] = lp.ensure_local_plugins(tmp_path)
    jars = sorted(p.name for p in (entry / lp.OUTBOX_SINK.name).glob("*.jar"))
    assert "ikkai-outbox-sink-0.1.0.jar" in jars
    assert any(name.startswith("avro-") for name in jars)
    provided = ("connect-api", "kafka-clients", "slf4j", "log4j")
    assert not [name for name in jars if name.startswith(provided)], "the worker provides these; two copies conflict"
    assert lp.built_plugin_dirs(tmp_path) == [entry]
    assert lp.ensure_local_plugins(tmp_path) == [entry]  # built once per source fingerprint

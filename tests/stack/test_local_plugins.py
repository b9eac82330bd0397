"""ikkai's Connect plugins: one Maven build path, keyed by a fingerprint of exactly the sources that go in."""

from __future__ import annotations

from pathlib import Path

import pytest

import stack.local_plugins as lp
from stack.local_plugins import COMPLETE, LocalPlugin, built_plugin_dirs, fingerprint, plugin_path_entry


def plugin(tmp_path: Path) -> LocalPlugin:
    module = tmp_path / "connector"
    (module / "src" / "main").mkdir(parents=True)
    (module / "pom.xml").write_text("<project/>")
    (module / "src" / "main" / "A.java").write_text("class A {}")
    schemas = tmp_path / "schemas" / "outbox_request"
    schemas.mkdir(parents=True)
    (schemas / "v1.avsc").write_text("{}")
    return LocalPlugin("p", module, (schemas,))


def test_fingerprint_changes_with_any_source_and_ignores_build_output(tmp_path: Path) -> None:
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


def test_the_fingerprint_does_not_depend_on_where_the_sources_are_installed(tmp_path: Path) -> None:
    """A checkout and a wheel in site-packages build the same plugin folder for the same sources."""
    here, there = plugin(tmp_path / "checkout"), plugin(tmp_path / "site-packages")
    assert fingerprint(here) == fingerprint(there)


def test_both_plugins_are_built_the_same_way_from_the_installed_packages() -> None:
    assert [p.name for p in lp.PLUGINS] == ["ikkai-outbox-sink", "ikkai-smt"]
    for p in lp.PLUGINS:
        assert (p.module / "pom.xml").is_file() and (p.module / "src" / "main" / "java").is_dir()
        assert (p.module / "src" / "test" / "java").is_dir(), f"{p.name}: Maven runs its JUnit tests on every build"


def test_only_complete_builds_of_the_current_sources_are_used(tmp_path: Path) -> None:
    entry = plugin_path_entry(tmp_path, lp.OUTBOX_SINK)
    entry.mkdir(parents=True)
    assert built_plugin_dirs(tmp_path) == []
    (entry / COMPLETE).write_text("")
    assert built_plugin_dirs(tmp_path) == [entry]  # the SMT is not built yet: only what is complete


@pytest.mark.integration  # runs Maven and the JUnit tests (no stack)
def test_the_outbox_plugin_builds_into_a_folder_with_only_what_the_worker_lacks(tmp_path: Path) -> None:
    """A real Maven build (JUnit tests included) into an empty jars folder, as on a clean clone."""
    entries = lp.ensure_local_plugins(tmp_path)
    entry, smt = entries
    assert sorted(p.name for p in (smt / lp.SMT.name).glob("*.jar")) == ["ikkai-smt-0.1.0.jar"]  # Jackson: the worker's
    jars = sorted(p.name for p in (entry / lp.OUTBOX_SINK.name).glob("*.jar"))
    assert "ikkai-outbox-sink-0.1.0.jar" in jars
    assert any(name.startswith("avro-") for name in jars)
    provided = ("connect-api", "kafka-clients", "slf4j", "log4j")
    assert not [name for name in jars if name.startswith(provided)], "the worker provides these; two copies conflict"
    assert lp.built_plugin_dirs(tmp_path) == entries
    assert lp.ensure_local_plugins(tmp_path) == entries  # built once per source fingerprint

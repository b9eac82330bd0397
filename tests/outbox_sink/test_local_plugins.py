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

"""ikkai's Connect plugins as distributable zips: Confluent Hub layout, deterministic, and loadable by
Kafka's own plugin scanner (``connect-plugin-path list``) once unzipped into a plugin.path folder."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import stack.local_plugins as lp
from cli.plugins import plugins
from ikkai.settings import jars_dir
from stack.artifacts import resolved_jars
from stack.local_plugins import PluginBuildError, package_archives, plugin_version, write_archive


def built(tmp_path: Path, plugin: lp.LocalPlugin, *extra: str) -> Path:
    folder = tmp_path / "built" / plugin.name
    folder.mkdir(parents=True)
    for name in (f"{plugin.name}-0.1.0.jar", *extra):
        (folder / name).write_bytes(name.encode())
    return folder


def test_an_archive_is_one_top_folder_with_manifest_and_lib(tmp_path: Path) -> None:
    folder = built(tmp_path, lp.OUTBOX_SINK, "avro-1.12.0.jar")
    archive = write_archive(lp.OUTBOX_SINK, folder, tmp_path / "out", version="0.1.0")
    assert archive.path == tmp_path / "out" / "ikkai-outbox-sink-0.1.0.zip"
    with zipfile.ZipFile(archive.path) as z:
        assert z.namelist() == [
            "ikkai-outbox-sink-0.1.0/lib/avro-1.12.0.jar",
            "ikkai-outbox-sink-0.1.0/lib/ikkai-outbox-sink-0.1.0.jar",
            "ikkai-outbox-sink-0.1.0/manifest.json",
        ]
        manifest = json.loads(z.read("ikkai-outbox-sink-0.1.0/manifest.json"))
    assert manifest["name"] == "ikkai-outbox-sink" and manifest["version"] == "0.1.0"
    assert manifest["component_types"] == ["sink"] and "OutboxSinkConnector" in manifest["description"]
    assert archive.sha512 == hashlib.sha512(archive.path.read_bytes()).hexdigest()


def test_the_same_jars_give_the_same_bytes(tmp_path: Path) -> None:
    folder = built(tmp_path, lp.SMT)
    first = write_archive(lp.SMT, folder, tmp_path / "a", version="0.1.0")
    (folder / "ikkai-smt-0.1.0.jar").touch()  # a new mtime changes nothing
    second = write_archive(lp.SMT, folder, tmp_path / "b", version="0.1.0")
    assert first.sha512 == second.sha512
    (folder / "ikkai-smt-0.1.0.jar").write_bytes(b"changed")
    assert write_archive(lp.SMT, folder, tmp_path / "c", version="0.1.0").sha512 != first.sha512


def test_an_unbuilt_plugin_is_an_error_not_an_empty_zip(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(PluginBuildError, match=r"no ikkai-smt-\*\.jar"):
        write_archive(lp.SMT, tmp_path / "empty", tmp_path / "out", version="0.1.0")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_versions_come_from_the_plugins_poms() -> None:
    for plugin in lp.PLUGINS:
        version = plugin_version(plugin)
        assert f"<artifactId>{plugin.name}</artifactId>\n  <version>{version}</version>" in (
            (plugin.module / "pom.xml").read_text()
        )


@pytest.mark.integration  # Maven builds both plugins (JUnit tests included); Kafka's scanner loads the zips
def test_kafkas_plugin_scanner_loads_both_unzipped_archives(tmp_path: Path) -> None:
    jars = resolved_jars(jars_dir())
    if jars is None:
        pytest.skip("the stack's jars are not resolved: run `ikkai setup`")
    result = CliRunner().invoke(plugins, ["package", "--out", str(tmp_path / "dist"), "-o", "json"])
    assert result.exit_code == 0, result.output
    archives = json.loads(result.stdout)["archives"]
    assert [a["plugin"] for a in archives] == ["ikkai-outbox-sink", "ikkai-smt"]
    assert package_archives(jars_dir(), tmp_path / "again")[0].sha512 == archives[0]["sha512"]  # deterministic
    plugin_path = tmp_path / "plugins"
    for archive in archives:
        with zipfile.ZipFile(archive["path"]) as z:
            z.extractall(plugin_path)
    listing = subprocess.run(
        ["java", "-cp", jars.kafka_classpath(), "org.apache.kafka.tools.ConnectPluginPath", "list",
         "--plugin-path", str(plugin_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr[-2000:]
    rows = {line.split("\t")[0]: line.split("\t") for line in listing.stdout.splitlines() if "\t" in line}
    sink = rows["dev.ikkai.outbox.OutboxSinkConnector"]
    smt = rows["dev.ikkai.connect.transforms.JsonFieldToKey"]
    header = rows["pluginName"]
    for row, kind in ((sink, "sink"), (smt, "transformation")):
        fields = dict(zip(header, row, strict=True))
        assert (fields["pluginType"], fields["isLoadable"], fields["hasManifest"]) == (kind, "true", "true")

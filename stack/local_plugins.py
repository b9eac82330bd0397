"""ikkai's own Kafka Connect plugins, each a Maven module built from the sources that ship with ikkai.

Two plugins, one way to build them:

- ``ikkai-outbox-sink`` (``outbox_sink/connector/``): the outbox sink connector; it copies the
  outbox schemas in from the schema catalog (``ikkai.contract.codec.schemas_dir()``);
- ``ikkai-smt`` (``connectors/plugins/ikkai-smt/``): single message transforms for source
  bundles (``JsonFieldToKey``). Kafka Connect calls these "transforms"; ikkai's Spark
  transforms are something else (``transforms/``).

``ensure_local_plugins`` runs ``mvn package`` (JUnit tests included) once per content of a
plugin's sources. The result lands in ``<jars_dir>/local-plugins/<plugin>-<fingerprint>/<plugin>/``
(the plugin jar plus its runtime dependencies; the worker provides connect-api, kafka-clients,
Jackson and slf4j), and ``<jars_dir>/local-plugins/<plugin>-<fingerprint>`` is one ``plugin.path``
entry. A ``.complete`` marker makes every later call return at once; changed sources give a new
fingerprint and a fresh folder, so a worker never loads a half-built or stale plugin. The
sources are found through the installed packages, so a wheel builds the same plugins as a checkout.

Maven builds into a staging folder outside the source tree, so two processes building at the
same time (two test sessions, say) never share a ``target/``.

For a Connect cluster ikkai does not run (Strimzi, Confluent Platform, plain Kafka), ``package_archives``
packs each built plugin as one distributable zip, ``<plugin>-<version>.zip``, in the Confluent Hub
component layout: one top folder ``<plugin>-<version>/`` holding ``manifest.json`` and ``lib/`` (the
plugin jar and its runtime dependencies, nothing the worker provides). Strimzi's ``build.plugins``
(artifact type ``zip``) and ``confluent connect plugin install`` take it as it is; unzipped into a
``plugin.path`` folder it is one plugin. The zip is deterministic (sorted entries, fixed timestamps),
so the same sources give the same bytes and the same SHA-512, which ``build.plugins`` can pin.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from xml.etree import ElementTree

from ikkai.archives import deterministic_zip
from ikkai.contract.codec import schemas_dir
from ikkai.errors import IkkaiError
from stack import maven_build
from stack.maven_build import COMPLETE, build_once


@dataclass(frozen=True)
class LocalPlugin:
    """A Maven module that builds one Connect plugin, and the schema folders it copies in (``-Dikkai.schemas.dir``)."""

    name: str
    module: Path
    inputs: tuple[Path, ...] = ()
    schemas: Path | None = None
    component_types: tuple[str, ...] = ()  # Confluent Hub's words: source, sink, transform, converter
    description: str = ""


def _package_dir(package: str, *parts: str) -> Path:
    return Path(str(importlib.resources.files(package).joinpath(*parts)))


OUTBOX_SINK = LocalPlugin(
    name="ikkai-outbox-sink",
    module=_package_dir("outbox_sink", "connector"),
    inputs=(schemas_dir() / "outbox_request", schemas_dir() / "outbox_receipt"),
    schemas=schemas_dir(),
    component_types=("sink",),
    description="Delivers outbox.requests to allow-listed HTTP APIs with one Idempotency-Key per side effect; "
    "writes receipts to outbox.receipts (dev.ikkai.outbox.OutboxSinkConnector).",
)
SMT = LocalPlugin(
    name="ikkai-smt",
    module=_package_dir("connectors", "plugins", "ikkai-smt"),
    component_types=("transform",),
    description="Single message transforms for raw ingest: JsonFieldToKey keys a JSON record by one of its fields "
    "without touching the value (dev.ikkai.connect.transforms.JsonFieldToKey).",
)
PLUGINS = (OUTBOX_SINK, SMT)


class PluginBuildError(IkkaiError):
    """Maven could not build a plugin from this repository's sources."""

    def __init__(self, plugin: str, problem: str, *, log: Path | None = None) -> None:
        where = f" (full output: {log})" if log else ""
        super().__init__(
            f"building the Connect plugin {plugin} failed: {problem}{where}",
            fix="fix the build (`mvn package` in the plugin's module shows the same error), then rerun `ikkai setup`",
        )
        self.plugin = plugin
        self.problem = problem
        self.log = log


def _source_files(plugin: LocalPlugin) -> list[Path]:
    files = [plugin.module / "pom.xml", *sorted((plugin.module / "src").rglob("*"))]
    for folder in plugin.inputs:
        files += sorted(folder.rglob("*"))
    return [f for f in files if f.is_file()]


def _name(path: Path, plugin: LocalPlugin) -> str:
    """A source file's name relative to its module or input folder: the same in a checkout and a wheel."""
    for root in (plugin.module, *(folder.parent for folder in plugin.inputs)):
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return path.name


def fingerprint(plugin: LocalPlugin) -> str:
    """``maven_build.fingerprint`` of the plugin's source files."""
    return maven_build.fingerprint((_name(path, plugin), path) for path in _source_files(plugin))


def plugin_path_entry(jars_dir: Path, plugin: LocalPlugin) -> Path:
    """The plugin.path entry for the current sources; it holds one folder, ``<plugin.name>/``."""
    return jars_dir / "local-plugins" / f"{plugin.name}-{fingerprint(plugin)}"


def built_plugin_dirs(jars_dir: Path) -> list[Path]:
    """plugin.path entries of every plugin already built from the current sources; never builds."""
    entries = [plugin_path_entry(jars_dir, plugin) for plugin in PLUGINS]
    return [entry for entry in entries if (entry / COMPLETE).exists()]


def ensure_local_plugins(jars_dir: Path, *, progress: TextIO = sys.stderr) -> list[Path]:
    """Build whatever plugin is missing for the current sources; the plugin.path entries of all."""
    return [_ensure(jars_dir, plugin, progress) for plugin in PLUGINS]


def _ensure(jars_dir: Path, plugin: LocalPlugin, progress: TextIO) -> Path:
    target = plugin_path_entry(jars_dir, plugin)
    if (target / COMPLETE).exists():
        return target

    def arguments(staging: Path) -> list[str]:
        command = ["-f", str(plugin.module / "pom.xml"), "package", f"-Dikkai.build.dir={staging / '.build'}"]
        if plugin.schemas is not None:
            command.append(f"-Dikkai.schemas.dir={plugin.schemas}")
        return command

    def plugin_folder(staging: Path) -> None:
        """``<staging>/<plugin>/``: the plugin jar and its runtime dependencies, without Maven's build folder."""
        build_dir = staging / ".build"
        folder = staging / plugin.name
        folder.mkdir()
        for jar in [*build_dir.glob(f"{plugin.name}-*.jar"), *(build_dir / "plugin-deps").glob("*.jar")]:
            shutil.copy2(jar, folder / jar.name)
        shutil.rmtree(build_dir)

    build_once(
        target,
        arguments,
        cwd=plugin.module,
        failure=lambda problem, log: PluginBuildError(plugin.name, problem, log=log),
        progress=progress,
        announce=f"building the Connect plugin {plugin.name} with Maven (JUnit tests included)",
        finish=plugin_folder,
    )
    progress.write(f"Connect plugin {plugin.name} ready in {target}\n")
    return target


def local_plugin_dirs_for_stack(jars_dir: Path, *, progress: TextIO = sys.stderr) -> list[Path]:
    """What the embedded worker adds to plugin.path: the local plugins, built if needed.

    A plugin that does not build is left out with a warning instead of stopping the stack:
    the broker and the worker are everyone's foundation, and ``ikkai setup`` (run by ``make``)
    already fails loudly on the same error.
    """
    try:
        return ensure_local_plugins(jars_dir, progress=progress)
    except IkkaiError as exc:
        progress.write(f"warning: starting the worker without ikkai's own Connect plugins: {exc}\n")
        return built_plugin_dirs(jars_dir)


_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


@dataclass(frozen=True)
class PluginArchive:
    """One distributable plugin zip and its SHA-512 (for Strimzi's ``build.plugins[].artifacts[].sha512sum``)."""

    plugin: str
    version: str
    path: Path
    sha512: str

    def as_dict(self) -> dict[str, str]:
        return {"plugin": self.plugin, "version": self.version, "path": str(self.path), "sha512": self.sha512}


def plugin_version(plugin: LocalPlugin) -> str:
    """The ``<version>`` of the plugin's Maven module: the version its jar and its archive carry."""
    pom = ElementTree.parse(plugin.module / "pom.xml")  # noqa: S314 - our own pom, shipped in the package
    version = pom.getroot().findtext("m:version", namespaces=_POM_NS)
    if not version:
        raise PluginBuildError(plugin.name, f"{plugin.module / 'pom.xml'} has no <version>")
    return version.strip()


def archive_manifest(plugin: LocalPlugin, version: str) -> dict[str, object]:
    """Confluent Hub's ``manifest.json`` for the plugin."""
    return {
        "name": plugin.name,
        "version": version,
        "title": plugin.name,
        "description": plugin.description,
        "owner": {"username": "ikkai", "name": "ikkai"},
        "component_types": list(plugin.component_types),
        "license": [{"name": "Apache License 2.0", "url": "https://www.apache.org/licenses/LICENSE-2.0"}],
        "requirements": ["Apache Kafka Connect 4.x (Java 17)"],
    }


def write_archive(plugin: LocalPlugin, built: Path, out_dir: Path, version: str | None = None) -> PluginArchive:
    """``out_dir/<plugin>-<version>.zip`` from a built plugin folder (the jars of ``plugin_path_entry``)."""
    version = version or plugin_version(plugin)
    jars = sorted(built.glob("*.jar"))
    if not any(jar.name.startswith(f"{plugin.name}-") for jar in jars):
        raise PluginBuildError(plugin.name, f"no {plugin.name}-*.jar in {built}: the plugin is not built")
    top = f"{plugin.name}-{version}"
    entries = [(f"{top}/lib/{jar.name}", jar.read_bytes()) for jar in jars]
    entries.append((f"{top}/manifest.json", json.dumps(archive_manifest(plugin, version), indent=2).encode() + b"\n"))
    content = deterministic_zip(entries)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{top}.zip"
    partial = out_dir / f".{top}.zip.{os.getpid()}"
    partial.write_bytes(content)
    partial.replace(target)
    return PluginArchive(plugin.name, version, target, hashlib.sha512(content).hexdigest())


def package_archives(jars_dir: Path, out_dir: Path, *, progress: TextIO = sys.stderr) -> list[PluginArchive]:
    """Build every plugin if needed (``mvn package``, tests included), then pack each as a distributable zip."""
    entries = ensure_local_plugins(jars_dir, progress=progress)
    return [write_archive(plugin, entry / plugin.name, out_dir) for plugin, entry in zip(PLUGINS, entries, strict=True)]

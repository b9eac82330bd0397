"""ikkai's own Kafka Connect plugins, compiled from source with javac into a plugin folder.

Maven Central has no single message transform that keys a record by a field of its *raw*
JSON value without rewriting the value (see connectors/plugins/ikkai-transforms). The
sources live in the repository; this module compiles them against the worker's own jars
once per source digest into ``<jars_dir>/ikkai-plugins/<digest>/<plugin>/``, a folder the
local stack adds to ``plugin.path``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from deploy.artifacts import JarSet
from deploy.errors import ArtifactError

SOURCES = Path(__file__).resolve().parents[1] / "connectors" / "plugins"
COMPLETE = ".complete"


def plugin_digest(sources: Path = SOURCES) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in sources.rglob("*") if p.is_file()):
        digest.update(path.relative_to(sources).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_ikkai_plugins(jars_dir: Path, jars: JarSet, *, progress: TextIO = sys.stderr) -> Path:
    """The folder to add to ``plugin.path``; compiles the plugins when this source digest is new."""
    target = jars_dir / "ikkai-plugins" / plugin_digest()
    if (target / COMPLETE).exists():
        return target
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar:
        raise ArtifactError(SOURCES, "javac/jar not found: ikkai's Connect plugins are compiled from source")
    progress.write(f"compiling ikkai's Connect plugins into {target}\n")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as staging_dir:
        staging = Path(staging_dir) / "out"
        for plugin in sorted(p for p in SOURCES.iterdir() if (p / "src").is_dir()):
            _build(plugin, staging / plugin.name, jars, javac, jar)
        (staging / COMPLETE).write_text(plugin_digest() + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def _build(plugin: Path, out: Path, jars: JarSet, javac: str, jar: str) -> None:
    classes = out.parent / f".{plugin.name}-classes"
    sources = [str(p) for p in sorted((plugin / "src").rglob("*.java"))]
    _run([javac, "--release", "17", "-nowarn", "-cp", jars.kafka_classpath(), "-d", str(classes), *sources], plugin)
    if (plugin / "META-INF").is_dir():
        shutil.copytree(plugin / "META-INF", classes / "META-INF")
    out.mkdir(parents=True)
    _run([jar, "--create", "--file", str(out / f"{plugin.name}.jar"), "-C", str(classes), "."], plugin)
    shutil.rmtree(classes)


def _run(command: list[str], plugin: Path) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ArtifactError(plugin, f"{Path(command[0]).name} failed: {detail[0] if detail else result.returncode}")

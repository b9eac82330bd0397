"""The jars of the embedded stack, resolved from stack/pom.xml by Maven.

``ensure_jars`` runs ``mvn dependency:copy-dependencies`` once per content of the pom files:
the jars land in ``<jars_dir>/<fingerprint>/`` and a ``.complete`` marker makes every later
call return at once without starting Maven. A change to any pom gives a new fingerprint and
a fresh folder, so a half-updated classpath can never be used.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ikkai.settings import SPARK_JARS
from stack import maven_build
from stack.errors import ArtifactError
from stack.maven_build import COMPLETE, build_once

POM = Path(__file__).with_name("pom.xml")


@dataclass(frozen=True)
class JarSet:
    """One resolved set of jars; the folder layout is fixed by the module poms."""

    root: Path

    @property
    def kafka(self) -> Path:
        return self.root / "kafka"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    @property
    def spark(self) -> Path:
        return self.root / "spark"

    def kafka_classpath(self) -> str:
        return str(self.kafka / "*")

    def spark_jars(self) -> list[Path]:
        return sorted(self.spark.glob("*.jar"))


def pom_files() -> list[Path]:
    return [POM, *sorted(POM.parent.glob("maven/*/pom.xml"))]


def fingerprint(poms: list[Path] | None = None, base: Path = POM.parent) -> str:
    """``maven_build.fingerprint`` of the pom files, named relative to ``base``."""
    return maven_build.fingerprint((pom.relative_to(base).as_posix(), pom) for pom in poms or pom_files())


def resolved_jars(jars_dir: Path) -> JarSet | None:
    """The jar set for the current poms if it is complete, without touching the network."""
    root = jars_dir / fingerprint()
    return JarSet(root) if (root / COMPLETE).exists() else None


def ensure_jars(jars_dir: Path, *, progress: TextIO = sys.stderr) -> JarSet:
    """The jar set for the current poms, resolved with Maven if needed; records its Spark jars for the jobs."""
    jars = resolved_jars(jars_dir) or _resolve(jars_dir, progress)
    record_spark_jars(jars_dir, jars)
    return jars


def record_spark_jars(jars_dir: Path, jars: JarSet) -> None:
    """Write ``<jars_dir>/spark-jars.txt`` (read by ``ikkai.settings.recorded_spark_jars``), atomically."""
    listing = "".join(f"{path}\n" for path in jars.spark_jars())
    target = jars_dir / SPARK_JARS
    if target.exists() and target.read_text() == listing:
        return
    partial = jars_dir / f".{SPARK_JARS}.{os.getpid()}"
    partial.write_text(listing)
    partial.replace(target)


def _resolve(jars_dir: Path, progress: TextIO) -> JarSet:
    target = jars_dir / fingerprint()
    downloaded = 0

    def count(line: str) -> None:
        nonlocal downloaded
        if line.startswith("Downloaded from"):
            downloaded += 1
            if downloaded % 25 == 0:
                progress.write(f"  {downloaded} artifacts downloaded\n")

    build_once(
        target,
        lambda staging: ["-f", str(POM), "dependency:copy-dependencies", f"-Dikkai.jars.dir={staging}"],
        cwd=POM.parent,
        failure=lambda problem, log: ArtifactError(POM, problem, log=log),
        progress=progress,
        announce=f"resolving stack jars with Maven into {target} (first run downloads ~150 MB)",
        on_line=count,
    )
    progress.write(f"stack jars ready ({downloaded} artifacts downloaded)\n")
    return JarSet(target)

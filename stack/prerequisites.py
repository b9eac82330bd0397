"""Checks that the machine has what the embedded stack runs on: Java 17+ and Maven.

Each check either returns what it found or raises ``PrerequisiteError`` with a one-line
message that says what to install. ``JAVA_HOME`` wins over ``java`` on the PATH, as it
does for Maven and for Spark.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ikkai.errors import PrerequisiteError

MIN_JAVA = 17

_JAVA_FIX = (
    "install a JDK 17 or newer (Debian: apt-get install openjdk-17-jdk-headless) "
    "and put it first on PATH or set JAVA_HOME"
)
_MAVEN_FIX = "install Maven 3.6 or newer (Debian: apt-get install maven) and put `mvn` on PATH"


@dataclass(frozen=True)
class Java:
    executable: Path
    major: int
    version: str


def parse_java_version(output: str) -> tuple[int, str]:
    """The major version and full version string from ``java -version`` output.

    Handles both the old ``1.8.0_392`` scheme and the modern ``17.0.15`` one.
    """
    match = re.search(r'version "([^"]+)"', output)
    if not match:
        raise ValueError(f"no version in {output.strip()[:120]!r}")
    version = match.group(1)
    parts = version.split(".")
    major = int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(re.match(r"\d+", parts[0]).group())  # type: ignore[union-attr]
    return major, version


def java_executable() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return candidate if candidate.exists() else None
    found = shutil.which("java")
    return Path(found) if found else None


def check_java() -> Java:
    executable = java_executable()
    if executable is None:
        where = (
            f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java"
            if os.environ.get("JAVA_HOME")
            else "not found on PATH"
        )
        raise PrerequisiteError("java", where, _JAVA_FIX)
    try:
        result = subprocess.run([str(executable), "-version"], capture_output=True, text=True, timeout=30, check=False)
        major, version = parse_java_version(result.stderr + result.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise PrerequisiteError("java", f"{executable} -version failed ({exc})", _JAVA_FIX) from exc
    if major < MIN_JAVA:
        raise PrerequisiteError(
            "java", f"{executable} is version {version}, ikkai needs {MIN_JAVA} or newer", _JAVA_FIX
        )
    return Java(executable, major, version)


def check_maven() -> Path:
    found = shutil.which("mvn")
    if not found:
        raise PrerequisiteError("mvn", "not found on PATH", _MAVEN_FIX)
    return Path(found)

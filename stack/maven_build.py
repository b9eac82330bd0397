"""Running Maven once per content of its inputs: into a staging folder, then renamed into place, then marked.

Every Maven product of the stack (the stack's jars, the schema registry and its converter, ikkai's
own Connect plugins) lands in ``<parent>/<name>/``, where ``<name>`` carries the ``fingerprint`` of
what it was built from: one rule for all of them, over the input files' names and contents.
``build_once`` runs Maven with the staging folder ``<parent>/.<name>.partial-<pid>`` as its output,
keeps the whole output in ``<parent>/maven-<name>.log``, and on failure raises the caller's error
with the first ``[ERROR]`` line. Only a complete build is renamed into place and
gets its ``.complete`` marker, so a half-built folder is never used; when another process finished
the same build first, its result is kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from ikkai.errors import IkkaiError
from stack.prerequisites import check_java, check_maven

COMPLETE = ".complete"


def fingerprint(files: Iterable[tuple[str, Path]]) -> str:
    """What a Maven product is built from, in 16 hex digits: each file's name and content, in the order given.

    The names are the caller's, relative to where the sources sit (``pom.xml``, ``src/main/...``), so a
    checkout and an installed wheel give the same fingerprint. Each name and each content is closed by
    a NUL, so no file runs into the next.
    """
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def build_once(
    target: Path,
    arguments: Callable[[Path], list[str]],
    *,
    cwd: Path,
    failure: Callable[[str, Path], IkkaiError],
    progress: TextIO,
    announce: str,
    finish: Callable[[Path], None] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> Path:
    """Run ``mvn -B <arguments(staging)>`` in ``cwd`` and move its staging folder to ``target``.

    ``announce`` is written to ``progress`` once Java and Maven are found; ``failure(problem, log)``
    makes the error to raise when Maven fails; ``finish(staging)`` shapes the output before it is
    marked complete; ``on_line`` sees each line of Maven's output.
    """
    check_java()
    mvn = check_maven()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.partial-{os.getpid()}"
    log_path = target.parent / f"maven-{target.name}.log"
    shutil.rmtree(staging, ignore_errors=True)
    command = [str(mvn), "-B", *arguments(staging)]
    progress.write(f"{announce}\n")
    progress.flush()
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                                   errors="replace")  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            if on_line is not None:
                on_line(line)
        code = process.wait()
    if code != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise failure(first_error(log_path) or f"mvn exited {code}", log_path)
    if finish is not None:
        finish(staging)
    (staging / COMPLETE).write_text(" ".join(command) + "\n")
    if (target / COMPLETE).exists():  # another process finished the same build first; its result is as good
        shutil.rmtree(staging, ignore_errors=True)
        return target
    shutil.rmtree(target, ignore_errors=True)  # a half-built folder of an older ikkai
    try:
        staging.rename(target)
    except OSError:  # another process renamed its own result in meanwhile
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / COMPLETE).exists():
            raise
    return target


def first_error(log: Path) -> str | None:
    """The first non-empty ``[ERROR]`` line of a Maven log: what went wrong, in Maven's words."""
    lines = log.read_text(errors="replace").splitlines()
    errors = [line.strip() for line in lines if line.startswith("[ERROR]") and line.strip() != "[ERROR]"]
    return errors[0] if errors else None

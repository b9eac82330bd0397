"""Where ikkai's data files are found: inside its Python packages, wherever those were imported from.

Every data file ships inside the package that reads it: the Avro catalog in
``ikkai/contract/schemas/``, the model artifact in ``spark_jobs/model/artifacts/``, the connector
bundles in ``connectors/bundles/``, the enrich job's transform spec next to the job. A checkout, an
installed wheel and the application zip of ``ikkai jobs submit`` therefore hold the same files at
the same package paths, and ``package_path`` finds them through ``importlib.resources`` in all
three. From a checkout or a wheel that is the file or folder itself; from the zip (zipimport, where
importlib.resources gives zip entries, not files) it is a copy in the temp folder, named by its
content hash, so callers always get a real ``Path``.

``shipped_path`` finds a file the user shipped to a Spark job themselves (``--files``, ``--archives``),
such as a retrained model passed to ``spark_jobs.infer --model``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path


def package_path(package: str, *parts: str) -> Path:
    """The data file or folder ``parts`` inside ``package``, as a real path even when the package is in a zip.

    A name that does not exist comes back as a path that does not exist either (the zip's, for a
    zipped package), so the caller's "missing" error names where it looked.
    """
    resource = files(package).joinpath(*parts)
    if isinstance(resource, Path):
        return resource
    if resource.is_file():
        return _extracted(resource.name, {resource.name: resource.read_bytes()}, folder=False)
    if resource.is_dir():
        return _extracted(resource.name, dict(_tree(resource)), folder=True)
    return Path(str(resource))


def package_file(package: str, name: str) -> Path:
    """The data file ``name`` (a path relative to ``package``, ``/``-separated) as a real path."""
    return package_path(package, *name.split("/"))


def _tree(folder: Traversable, prefix: str = "") -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        relative = f"{prefix}{entry.name}"
        if entry.is_dir():
            found += _tree(entry, relative + "/")
        elif entry.is_file():
            found.append((relative, entry.read_bytes()))
    return found


def _extracted(name: str, contents: dict[str, bytes], *, folder: bool) -> Path:
    """``contents`` (relative path → bytes) written once to ``<temp>/ikkai-<content hash>-<name>``.

    A folder's files go under that path; a single file's one entry (named ``name``) is that path.
    """
    digest = hashlib.sha256(b"folder\0" if folder else b"file\0")
    for relative, content in sorted(contents.items()):
        digest.update(f"{relative}\0{len(content)}\0".encode())
        digest.update(content)
    target = Path(tempfile.gettempdir()) / f"ikkai-{digest.hexdigest()[:12]}-{name}"
    if target.exists():
        return target
    partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.", suffix=".partial", dir=target.parent))
    partial.chmod(0o755)  # readable like any other installed file, not private like a temp folder
    for relative, content in contents.items():
        (partial / relative).parent.mkdir(parents=True, exist_ok=True)
        (partial / relative).write_bytes(content)
    try:  # a process that got there first wrote the same content: keep its copy
        os.replace(partial if folder else partial / name, target)
    except OSError:
        if not target.exists():
            raise
    shutil.rmtree(partial, ignore_errors=True)
    return target


def shipped_path(path: str | Path) -> Path:
    """``path`` as given if it exists (or is absolute); else the same relative path under Spark's file root.

    Spark's file root is where ``--files``/``--archives`` land in local mode and on a driver in
    cluster mode; on YARN and Kubernetes executors they are also in the working directory.
    """
    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists():
        return candidate
    root = _spark_files_root()
    if root is not None and (Path(root) / candidate).exists():
        return Path(root) / candidate
    return candidate


def _spark_files_root() -> str | None:
    if "pyspark" not in sys.modules:
        return None  # no Spark in this process: nothing was shipped to it
    from pyspark import SparkContext, SparkFiles

    if SparkFiles._is_running_on_worker or SparkContext._active_spark_context is not None:
        return SparkFiles.getRootDirectory()
    return None

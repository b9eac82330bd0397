"""What a cluster needs to run an ikkai job, packed for spark-submit.

``ikkai jobs submit`` ships one **application zip** (``--py-files``) next to the job script:
ikkai's Python packages, so executors (and a driver in cluster mode) import the same code the job
was written against, with the data that ships inside those packages (the Avro catalog in
``ikkai/contract/schemas/``, the model artifact and its feature snapshots in
``spark_jobs/model/artifacts/``, the transform spec and tables). Code and data cannot drift apart:
a job finds its data through ``ikkai.resources.package_path``, from the zip as from a checkout.

The packages are read through ``importlib.resources``, so the zip is the same whether ikkai runs
from a checkout or an installed wheel. It is built deterministically (sorted entries, fixed
timestamps): the same code gives the same bytes and the same content hash in the file name, so a
cluster-side cache can keep it.
"""

from __future__ import annotations

import hashlib
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from ikkai.archives import deterministic_zip

PACKAGES = ("ikkai", "spark_jobs", "transforms")  # what a job imports; never the control plane, stack or demo
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def _entries(folder: Traversable, prefix: str) -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    for entry in folder.iterdir():
        name = f"{prefix}/{entry.name}"
        if entry.is_dir() and entry.name != "__pycache__":
            found += _entries(entry, name)
        elif entry.is_file() and not entry.name.endswith(_SKIPPED_SUFFIXES):
            found.append((name, entry.read_bytes()))
    return found


def _write(dist: Path, stem: str, content: bytes) -> Path:
    dist.mkdir(parents=True, exist_ok=True)
    target = dist / f"{stem}-{hashlib.sha256(content).hexdigest()[:12]}.zip"
    if not target.exists():
        partial = target.with_suffix(".partial")
        partial.write_bytes(content)
        partial.replace(target)
    return target


def build_app_zip(dist: Path, packages: tuple[str, ...] = PACKAGES) -> Path:
    """``dist/ikkai-app-<hash>.zip``: the packages with their data, importable straight from the zip."""
    entries = [entry for package in packages for entry in _entries(files(package), package.replace(".", "/"))]
    return _write(dist, "ikkai-app", deterministic_zip(entries))

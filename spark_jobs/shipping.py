"""What a cluster needs to run an ikkai job, packed for spark-submit, and how the job finds it again.

``ikkai jobs submit`` ships two archives next to the job script:

- the **application zip** (``--py-files``): ikkai's Python packages, so executors (and a driver in
  cluster mode) import the same code the job was written against;
- the **data archive** (``--archives …#ikkai-data``): ``schemas/`` (the Avro catalog every
  reader and writer decodes with) and ``models/`` (the model artifact and its feature snapshots).

Both are built deterministically (sorted entries, fixed timestamps), so the same checkout gives the
same bytes and the same content hash in the file name: a cluster-side cache can keep them.
Where an archive lands on the cluster, and how a job finds it there: ``ikkai.resources``.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("ikkai", "spark_jobs", "transforms")  
DATA = ("schemas", "models")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest timestamp: entries carry no build time


def _files(root: Path, folders: Iterable[str]) -> list[Path]:
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".pyc", ".pyo"}:
                found.append(path)
    return found


def _deterministic_zip(files: list[Path], root: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def _write(dist: Path, stem: str, content: bytes) -> Path:
    dist.mkdir(parents=True, exist_ok=True)
    target = dist / f"{stem}-{hashlib.sha256(content).hexdigest()[:12]}.zip"
    if not target.exists():
        partial = target.with_suffix(".partial")
        partial.write_bytes(content)
        partial.replace(target)
    return target


def build_app_zip(dist: Path, root: Path = REPO) -> Path:
    """``dist/ikkai-app-<hash>.zip``: the Python packages, importable straight from the zip."""
    return _write(dist, "ikkai-app", _deterministic_zip(_files(root, PACKAGES), root))


def build_data_archive(dist: Path, root: Path = REPO) -> Path:
    """``dist/ikkai-data-<hash>.zip``: schemas/ and models/, unpacked on the cluster as ``ikkai-data/``."""
    return _write(dist, "ikkai-data", _deterministic_zip(_files(root, DATA), root))

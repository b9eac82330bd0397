"""What a cluster needs to run an ikkai job, packed for spark-submit, and how the job finds it again.

``ikkai jobs submit`` ships two archives next to the job script:

- the **application zip** (``--py-files``): ikkai's Python packages, so executors (and a driver in
  cluster mode) import the same code the job was written against;
- the **data archive** (``--archives …#ikkai-data``): ``schemas/`` (the Avro catalog every
  reader and writer decodes with) and ``models/`` (the model artifact and its feature snapshots).

Both are built deterministically (sorted entries, fixed timestamps), so the same checkout gives the
same bytes and the same content hash in the file name: a cluster-side cache can keep them.

Where an archive lands depends on the cluster manager: YARN and Kubernetes unpack it into the
working directory of each container, local mode into Spark's file root. ``shipped_path`` resolves a
relative path against both, so one spark-submit line works everywhere.
"""

from __future__ import annotations

import hashlib
import io
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("ikkai", "deploy", "connectors", "spark_jobs", "transforms", "outbox_sink")
DATA = ("schemas", "models")
DATA_ALIAS = "ikkai-data"  # the folder name the data archive unpacks to on the cluster
SHIPPED_SCHEMAS = f"{DATA_ALIAS}/schemas"
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


def package_file(package: str, name: str) -> Path:
    """A data file that ships inside a package, as a real path even when the package is imported from a zip.

    From a checkout or an installed wheel that is the file itself; from the application zip of
    ``ikkai jobs submit`` it is a copy in the temp folder, named by its content hash.
    """
    resource = files(package) / name
    if isinstance(resource, Path):
        return resource
    content = resource.read_bytes()
    target = Path(tempfile.gettempdir()) / f"ikkai-{hashlib.sha256(content).hexdigest()[:12]}-{name}"
    if not target.exists():
        partial = target.with_suffix(".partial")
        partial.write_bytes(content)
        partial.replace(target)
    return target

"""Where ikkai's data files are found: in the package, or where spark-submit shipped them.

``ikkai jobs submit`` ships ``schemas/`` and ``models/`` as a data archive that unpacks to
``ikkai-data/`` on the cluster. Where it lands depends on the cluster manager: YARN and
Kubernetes unpack it into the working directory of each container, local mode into Spark's
file root. ``shipped_path`` resolves a relative path against both, so one spark-submit line
works everywhere. ``package_file`` gives a data file that ships inside a Python package as a
real path, even when the package is imported from the application zip.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

DATA_ALIAS = "ikkai-data"  # the folder name the data archive unpacks to on the cluster
SHIPPED_SCHEMAS = f"{DATA_ALIAS}/schemas"


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

"""Where ikkai's data files are found: inside its Python packages, wherever those were imported from.

Every data file ships inside the package that reads it: the Avro catalog in
``ikkai/contract/schemas/``, the model artifact in ``spark_jobs/model/artifacts/``, the connector
bundles in ``connectors/bundles/``, the enrich job's transform spec next to the job. A checkout, an
installed wheel and the application zip of ``ikkai jobs submit`` therefore hold the same files at
the same package paths, and ``package_path`` finds them through ``importlib.resources`` in all
three. From a checkout or a wheel that is the file or folder itself; from the zip (zipimport, where
importlib.resources gives zip entries, not files) it is a copy, named by its content hash, so
callers always get a real ``Path``.

Those copies are the model, the Avro catalog and the transform spec a job trusts, so only this
user may write where they live, and a copy is used only when it holds exactly what the zip holds:

- They live in ``<temp>/ikkai-<uid>/``, created 0700, and used only if it is a real folder (not a
  link) owned by this user that group and others cannot write; anything else is refused with a
  ``ConfigError`` that names the folder. (The temp folder itself is shared: a copy straight in it,
  at a name anyone can compute, was once returned as found, so another local user could plant it.)
- A copy found there is read back (no link followed) and hashed the way the package was; one that
  differs in any byte or file, or holds a link, is moved aside and extracted afresh, and a fresh
  extraction is returned only once it reads back to the package's hash (else a ``ConfigError``).
  Reading back costs a read of the copy (the shipped data is a few hundred KiB) on every import.

``shipped_path`` finds a file the user shipped to a Spark job themselves (``--files``, ``--archives``),
such as a retrained model passed to ``spark_jobs.infer --model``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from ikkai.errors import ConfigError
from ikkai.private_folders import private_temp_folder

EXTRACT_ATTEMPTS = 3  # a copy other processes keep replacing under us: give up loudly after this many


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


def _digest(contents: dict[str, bytes], *, folder: bool) -> str:
    digest = hashlib.sha256(b"folder\0" if folder else b"file\0")
    for relative, content in sorted(contents.items()):
        digest.update(f"{relative}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def _private_root() -> Path:
    """``<temp>/ikkai-<uid>``, where the copies live: created 0700, refused unless only this user can write it."""
    return private_temp_folder(
        "ikkai", "package data",
        "whoever can write it can replace the model, the Avro catalog or the transform spec a job loads",
    )  # fmt: skip


def _read_back(target: Path, name: str, *, folder: bool) -> dict[str, bytes] | None:
    """What ``target`` holds, keyed as ``_extracted``'s contents; None if absent, a link, or holding a non-file."""
    if not folder:
        return {name: target.read_bytes()} if _is_plain(target, stat.S_ISREG) else None
    if not _is_plain(target, stat.S_ISDIR):
        return None
    contents: dict[str, bytes] = {}
    for here, folders, names in os.walk(target):  # never follows a link: a linked folder is checked as an entry
        for entry in (*folders, *names):
            path = Path(here) / entry
            if _is_plain(path, stat.S_ISREG):
                contents[path.relative_to(target).as_posix()] = path.read_bytes()
            elif not _is_plain(path, stat.S_ISDIR):
                return None
    return contents


def _is_plain(path: Path, kind: Callable[[int], bool]) -> bool:
    """``path`` itself (a link is not followed) is of ``kind`` (``stat.S_ISREG``, ``stat.S_ISDIR``)."""
    try:
        return kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _discard(target: Path, root: Path) -> None:
    """Move ``target`` (an altered copy) out of the way in one rename, then delete it."""
    stale = Path(tempfile.mkdtemp(prefix=f"{target.name}.", suffix=".stale", dir=root))
    with contextlib.suppress(FileNotFoundError):  # another process discarded it first
        os.rename(target, stale / "copy")
    shutil.rmtree(stale, ignore_errors=True)


def _extracted(name: str, contents: dict[str, bytes], *, folder: bool) -> Path:
    """``contents`` (relative path → bytes) as ``<temp>/ikkai-<uid>/<content hash>-<name>``, checked (module docstring).

    A folder's files go under that path; a single file's one entry (named ``name``) is that path.
    """
    digest = _digest(contents, folder=folder)
    root = _private_root()
    target = root / f"{digest[:12]}-{name}"
    for _ in range(EXTRACT_ATTEMPTS):
        found = _read_back(target, name, folder=folder)
        if found is not None and _digest(found, folder=folder) == digest:
            return target
        if os.path.lexists(target):  # altered, or not what a copy is: never returned, never reused
            _discard(target, root)
        partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.", suffix=".partial", dir=root))
        for relative, content in contents.items():
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            (partial / relative).write_bytes(content)
        try:  # a process that got there first wrote the same content: the next round checks its copy
            os.replace(partial if folder else partial / name, target)
        except OSError:
            if not os.path.lexists(target):
                raise
        shutil.rmtree(partial, ignore_errors=True)
    found = _read_back(target, name, folder=folder)
    if found is not None and _digest(found, folder=folder) == digest:
        return target
    raise ConfigError(
        "package data", str(target),
        f"does not hold what the package holds after {EXTRACT_ATTEMPTS} extractions (sha-256 {digest[:12]})",
        fix=f"something keeps changing {root}: find what writes there, remove the folder and start again",
    )  # fmt: skip


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

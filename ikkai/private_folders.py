"""Folders only this user can write: what a job trusts is read from them, so anything else is refused (rule 11)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from ikkai.errors import ConfigError


def make_private_folder(folder: Path) -> str | None:
    """Create ``folder`` 0700 if it is missing; then what makes it unfit, or None when only this user can write it.

    Unfit: a symbolic link (it can be swapped), not a folder, another owner, or writable by group or others.
    The caller refuses with its own ``ConfigError``, saying what the folder is for.
    """
    with contextlib.suppress(FileExistsError):  # a file or a link there: named below
        folder.mkdir(mode=0o700, parents=True)
    found = os.lstat(folder)
    if stat.S_ISLNK(found.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(found.st_mode):
        return "is not a folder"
    if found.st_uid != os.getuid():
        return f"belongs to uid {found.st_uid}, not to this user (uid {os.getuid()})"
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(found.st_mode):o})"
    return None


def private_folder(folder: Path, option: str, stake: str) -> Path:
    """``folder``, created 0700; a ``ConfigError`` naming ``option`` and what is at ``stake`` unless it is fit.

    For a job's folder given by an option (``--replay-requests``, ``--model-store``): ``stake`` says what
    whoever else could write there would do.
    """
    problem = make_private_folder(folder)
    if problem is None:
        return folder
    raise ConfigError(
        "job", option, f"{folder} {problem}: {stake}",
        fix=f"chmod 700 {folder} if it is yours, or name a folder of your own (the job creates it 0700)",
    )  # fmt: skip


def private_temp_folder(name: str, stake: str) -> Path:
    """``<temp>/<name>-<uid>``, created 0700; a ``ConfigError`` saying what is at ``stake`` unless it is fit.

    For the folders ikkai keeps under the temporary folder (the executor writers' sockets, the producer
    owner files): one per user, so another user who made it first (a squatter) is refused, never used.
    """
    folder = Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    problem = make_private_folder(folder)
    if problem is None:
        return folder
    raise ConfigError(
        "temporary folder", str(folder), f"{problem}: {stake}",
        fix=f"remove {folder} (ikkai creates it again, 0700, for this user) or set TMPDIR to a folder of your own",
    )  # fmt: skip

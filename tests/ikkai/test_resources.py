"""``ikkai.resources``: data inside a package is a real path, whether the package is a folder or in a zip.

A zipped package's data is copied into ``<temp>/ikkai-<uid>``, a folder only this user can write,
and a copy is returned only if it holds exactly the package's bytes (issue 30 item 4).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ikkai.errors import ConfigError
from ikkai.resources import package_file, package_path

_FILES = {
    "zipped_pkg/__init__.py": b"",
    "zipped_pkg/data/a.txt": b"alpha",
    "zipped_pkg/data/nested/b.txt": b"beta",
    "zipped_pkg/spec.yaml": b"steps: []\n",
}


@pytest.fixture
def zipped_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``zipped_pkg`` importable only from a zip (as from the application zip of ``ikkai jobs submit``)."""
    app = tmp_path / "app.zip"
    with zipfile.ZipFile(app, "w") as archive:
        for name, content in _FILES.items():
            archive.writestr(name, content)
    monkeypatch.syspath_prepend(str(app))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    yield tmp_path / "tmp"
    sys.modules.pop("zipped_pkg", None)


def test_a_package_folder_gives_its_own_files() -> None:
    import ikkai.contract

    folder = Path(ikkai.contract.__file__).parent
    assert package_path("ikkai.contract", "schemas") == folder / "schemas"
    assert package_file("ikkai.contract", "schemas/payment_event/v1.avsc") == folder / "schemas/payment_event/v1.avsc"


def test_a_zipped_folder_is_copied_out_once_with_all_its_files(zipped_package: Path) -> None:
    folder = package_path("zipped_pkg", "data")
    assert folder.is_dir() and folder.parent == zipped_package / f"ikkai-{os.getuid()}"
    assert {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == {
        "a.txt": b"alpha",
        "nested/b.txt": b"beta",
    }
    assert package_path("zipped_pkg", "data") == folder  # same content, same copy
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no partial copies left behind


def test_a_zipped_file_is_copied_out_under_its_own_name(zipped_package: Path) -> None:
    spec = package_file("zipped_pkg", "spec.yaml")
    nested = package_file("zipped_pkg", "data/nested/b.txt")
    assert spec.read_bytes() == b"steps: []\n" and spec.name.endswith("-spec.yaml")
    assert nested.read_bytes() == b"beta" and nested.name.endswith("-b.txt")


def test_a_missing_zipped_name_is_a_missing_path_that_says_where(zipped_package: Path) -> None:
    missing = package_path("zipped_pkg", "no", "such.json")
    assert not missing.exists()
    assert missing.as_posix().endswith("app.zip/zipped_pkg/no/such.json")
    assert list(zipped_package.iterdir()) == []


def _data_copy(contents: dict[str, bytes]) -> str:
    """The name a copy of ``zipped_pkg/data`` with ``contents`` gets: its content hash, then the folder's name."""
    digest = hashlib.sha256(b"folder\0")
    for relative, content in sorted(contents.items()):
        digest.update(f"{relative}\0{len(content)}\0".encode())
        digest.update(content)
    return f"{digest.hexdigest()[:12]}-data"


DATA = {"a.txt": b"alpha", "nested/b.txt": b"beta"}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_folder_planted_at_the_old_predictable_temp_path_is_not_returned(zipped_package: Path) -> None:
    """Issue 30 item 4: ``<temp>/ikkai-<content hash>-<name>`` was reused as found, so anyone could plant a model."""
    planted = zipped_package / f"ikkai-{_data_copy(DATA)}"
    (planted / "nested").mkdir(parents=True)
    (planted / "a.txt").write_bytes(b"a model of the attacker's choosing")
    (planted / "nested/b.txt").write_bytes(b"beta")
    folder = package_path("zipped_pkg", "data")
    assert folder != planted and _files(folder) == DATA


@pytest.mark.parametrize(
    "alter",
    [
        lambda copy: (copy / "a.txt").write_bytes(b"a swapped model"),
        lambda copy: (copy / "nested/c.txt").write_bytes(b"one file more"),
        lambda copy: (copy / "nested/b.txt").unlink(),
        lambda copy: ((copy / "a.txt").unlink(), (copy / "a.txt").symlink_to(copy / "nested/b.txt")),
        lambda copy: ((copy / "nested/b.txt").unlink(), (copy / "nested/b.txt").mkdir()),
    ],
    ids=["changed-bytes", "extra-file", "missing-file", "symlink", "folder-for-a-file"],
)
def test_an_altered_copy_is_extracted_afresh(zipped_package: Path, alter: Any) -> None:
    folder = package_path("zipped_pkg", "data")
    alter(folder)
    assert package_path("zipped_pkg", "data") == folder and _files(folder) == DATA
    assert not (folder / "a.txt").is_symlink() and not (folder / "nested/c.txt").exists()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # the altered copy is gone too


def test_an_altered_file_copy_and_a_link_in_its_place_are_replaced(zipped_package: Path) -> None:
    spec = package_file("zipped_pkg", "spec.yaml")
    spec.write_bytes(b"steps: [run_anything]\n")
    assert package_file("zipped_pkg", "spec.yaml").read_bytes() == b"steps: []\n"
    elsewhere = zipped_package / "elsewhere.yaml"
    elsewhere.write_bytes(b"steps: []\n")  # the same bytes, behind a link: still not a copy ikkai wrote
    spec.unlink()
    spec.symlink_to(elsewhere)
    assert package_file("zipped_pkg", "spec.yaml") == spec and not spec.is_symlink()


def _refused(zipped_package: Path) -> str:
    with pytest.raises(ConfigError) as refused:
        package_path("zipped_pkg", "data")
    assert refused.value.key == str(zipped_package / f"ikkai-{os.getuid()}")
    assert not any(zipped_package.rglob("*-data")), "nothing is extracted into a folder that is refused"
    return str(refused.value)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777, 0o722], ids=oct)
def test_a_copy_folder_others_can_write_is_refused(zipped_package: Path, mode: int) -> None:
    root = zipped_package / f"ikkai-{os.getuid()}"
    root.mkdir()
    root.chmod(mode)
    message = _refused(zipped_package)
    assert f"is writable by group or others (mode {mode:o})" in message and f"remove {root}" in message


def test_a_copy_folder_of_another_user_or_behind_a_link_is_refused(
    zipped_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = zipped_package / "mine"
    mine.mkdir(mode=0o700)
    (zipped_package / f"ikkai-{os.getuid()}").symlink_to(mine)
    assert "is a symbolic link" in _refused(zipped_package)
    other = os.getuid() + 4242  # a folder named for that user, but this user's: so not that user's own
    monkeypatch.setattr(os, "getuid", lambda: other)
    (zipped_package / f"ikkai-{other}").mkdir(mode=0o700)
    message = _refused(zipped_package)
    assert f"belongs to uid {other - 4242}, not to this user (uid {other})" in message
    assert "another user created" in message and "set TMPDIR" in message  # it cannot remove what it does not own
    assert f"remove {zipped_package}" not in message


def test_the_copy_folder_is_created_private(zipped_package: Path) -> None:
    folder = package_path("zipped_pkg", "data")
    status = os.lstat(folder.parent)
    assert folder.parent.name == f"ikkai-{os.getuid()}" and status.st_uid == os.getuid()
    assert status.st_mode & 0o077 == 0, oct(status.st_mode)


def test_a_copy_that_does_not_read_back_to_the_package_hash_after_extraction_is_an_error(
    zipped_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something that rewrites each fresh copy as it lands: no attempt is returned, the error names the copy."""
    replace = os.replace

    def replace_then_tamper(source: Any, target: Any) -> None:
        replace(source, target)
        (Path(target) / "a.txt").write_bytes(b"rewritten as it lands")

    monkeypatch.setattr(os, "replace", replace_then_tamper)
    with pytest.raises(ConfigError, match="does not hold what the package holds after 3 extractions") as refused:
        package_path("zipped_pkg", "data")
    assert refused.value.key == str(zipped_package / f"ikkai-{os.getuid()}" / _data_copy(DATA))

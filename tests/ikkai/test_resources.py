"""``ikkai.resources``: data inside a package is a real path, whether the package is a folder or in a zip."""

from __future__ import annotations

import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    assert folder.is_dir() and folder.parent == zipped_package
    assert {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == {
        "a.txt": b"alpha",
        "nested/b.txt": b"beta",
    }
    assert package_path("zipped_pkg", "data") == folder  # same content, same copy
    assert [p.name for p in zipped_package.iterdir()] == [folder.name]  # no partial copies left behind


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

"""docs/architecture.md draws the floors from the same lines import-linter checks (pyproject.toml)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return list(config["contracts"])


def test_the_documented_floors_are_the_checked_ones() -> None:
    [layers] = [c["layers"] for c in contracts() if c["type"] == "layers" and "containers" not in c]
    page = (ROOT / "docs" / "architecture.md").read_text()
    drawn = re.search(r"```\nfloors, top to bottom\n(.*?)```", page, re.S)
    assert drawn, "docs/architecture.md has no 'floors, top to bottom' block"
    assert [line.strip() for line in drawn[1].splitlines() if line.strip()] == layers


def test_every_package_of_the_product_stands_on_a_floor() -> None:
    [layers] = [c["layers"] for c in contracts() if c["type"] == "layers" and "containers" not in c]
    on_floors = {name.strip() for floor in layers for name in str(floor).split("|")}
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert on_floors == set(config["importlinter"]["root_packages"])
    assert set(config["mypy"]["packages"]) | {"benchmarks"} == on_floors


def layout_rows() -> dict[str, str]:
    """docs/architecture.md's layout table: each row's first cell (its backticked paths) → the row's text."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = re.search(r"^\| path \| what it holds \|\n\|---\|---\|\n((?:\|.*\n)+)", page, re.M)
    assert table, "docs/architecture.md has no '| path | what it holds |' table"
    rows: dict[str, str] = {}
    for line in table[1].splitlines():
        first, text = line.strip("|").split("|", 1)
        for path in re.findall(r"`([^`]+)`", first):
            rows[path] = text
    return rows


def test_every_path_the_layout_table_names_is_in_the_tree() -> None:
    """A row's paths, and every ``name.py`` or ``name/`` its text backticks, exist under that row's folder or, for
    another room's, from the root (a module renamed or folded away fails here until the table follows)."""
    missing = []
    for path, text in layout_rows().items():
        folder = ROOT / path
        if not folder.exists():
            missing.append(path)
            continue
        if not folder.is_dir():
            continue
        for name in re.findall(r"`([A-Za-z0-9_./<>-]+(?:\.py|/))`", text):
            if "<" in name or name.startswith("/"):
                continue
            here = (folder / name).exists() or any(folder.glob(f"**/{name.rstrip('/')}"))
            if not here and not (ROOT / name).exists():  # a path of another room is named from the root
                missing.append(f"{path}: {name}")
    assert missing == []


def test_every_room_of_the_tree_is_in_the_layout_table() -> None:
    """Every package on a floor has a row; every package inside one is named in its parent's row or has its own."""
    rows = layout_rows()
    root_packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    unlisted = [f"{name}/" for name in root_packages if f"{name}/" not in rows]
    for name in root_packages:
        for init in sorted((ROOT / name).glob("*/__init__.py")):
            inner = init.parent.name
            own_row = f"{name}/{inner}/" in rows
            if not own_row and f"`{inner}/`" not in rows.get(f"{name}/", ""):
                unlisted.append(f"{name}/{inner}/")
    assert unlisted == []

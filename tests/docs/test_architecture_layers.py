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

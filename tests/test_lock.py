"""The lock: a fresh machine installs exactly the versions CI ran with (``constraints.txt``, ``make lock``)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;]+)$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _PIN.match(line.strip())
        assert match, f"constraints.txt line {number}: {line!r} is not NAME==VERSION"
        pins[_canonical(match[1])] = match[2]
    return pins


def test_every_dependency_of_the_project_is_pinned() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"].values()
    wanted = [*project["dependencies"], *(spec for extra in extras for spec in extra)]
    names = {_canonical(re.split(r"[\s<>=!~\[;]", spec, maxsplit=1)[0]) for spec in wanted} - {"ikkai"}
    missing = sorted(names - _pins().keys())
    assert not missing, f"not in constraints.txt: {missing} (run `make lock`)"


def test_the_environment_running_the_tests_is_the_locked_one() -> None:
    installed = {_canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    drift = {name: (pinned, installed.get(name)) for name, pinned in _pins().items() if installed.get(name) != pinned}
    assert not drift, f"installed versions differ from constraints.txt (pinned, installed): {drift}"

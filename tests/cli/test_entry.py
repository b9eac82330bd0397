"""The console script's entry: an install without the control-plane extra gets one line, not a traceback."""

from __future__ import annotations

import sys

import pytest

import cli


def test_a_missing_control_plane_library_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m == "cli.app" or m.startswith("click")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "click", None)  # what an install without click looks like to `import click`

    with pytest.raises(SystemExit) as exited:
        cli.main()

    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'click' is not installed" in err and "pip install 'ikkai[control]'" in err


def test_a_missing_module_of_our_own_is_a_broken_install_and_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cli.app", raising=False)
    monkeypatch.setitem(sys.modules, "cli.app", None)

    with pytest.raises(ModuleNotFoundError):
        cli.main()

"""A secured stack keeps its secrets to its own user: on disk and on command lines.

After ``up --secure``, every file under the stack's home that holds one of its secrets (the
client, inter-broker and Connect REST passwords from ``passwords.json``, or a private key) is
0600, and every folder from the home down to it 0700; no file of it (the brokers' segments among them)
can be read by another user although the home was made 0755 before (as a home ``ikkai setup`` made
is); no command the stack ran (the storage format, each JVM) and no command line of its live
processes (``/proc/<pid>/cmdline``, which any local user may read) carries a password.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ikkai.settings import jars_dir
from stack import processes
from stack.local_stack import LocalStack
from stack.shape import StackOptions

pytestmark = pytest.mark.integration

PRIVATE_KEY = b"PRIVATE KEY-----"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, list[list[str]]]]:
    """A secured stack that is up, and every command line the ``up`` started (recorded as it ran them)."""
    home = tmp_path_factory.mktemp("secret-files") / "home"
    home.mkdir(mode=0o755)  # an existing home open to others, as `ikkai setup` leaves ~/.ikkai
    local = LocalStack(home, jars_dir(), StackOptions(secure=True), heap="512m", progress=sys.stderr)
    commands: list[list[str]] = []

    class Recording(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, args, *rest, **options):  # type: ignore[no-untyped-def]
            commands.append([args] if isinstance(args, str | bytes) else [str(arg) for arg in args])
            super().__init__(args, *rest, **options)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(subprocess, "Popen", Recording)
            local.up()
        yield local, commands
    finally:
        local.down(purge=True)


def _secrets(local: LocalStack) -> list[bytes]:
    stack = local.stack_secrets()
    assert stack is not None
    passwords = [stack.client_password, stack.broker_password, stack.rest_password]
    assert all(len(password) >= 16 for password in passwords)
    return [password.encode() for password in passwords]


def _holds_secret(path: Path, secrets: list[bytes]) -> bool:
    try:
        data = path.read_bytes()
    except FileNotFoundError:  # a checkpoint the live broker replaced while the walk ran
        return False
    return PRIVATE_KEY in data or any(secret in data for secret in secrets)


def test_every_file_holding_a_secret_is_0600_in_0700_folders(secured: tuple[LocalStack, list[list[str]]]) -> None:
    local, _ = secured
    secrets = _secrets(local)
    files = [path for path in local.home.rglob("*") if path.is_file() and not path.is_symlink()]
    holding = [path for path in files if _holds_secret(path, secrets)]
    # the broker's and the worker's properties hold passwords: the walk must find them
    assert local.config_dir / "server.properties" in holding
    assert local.config_dir / "connect-distributed.properties" in holding
    assert {path.name for path in holding} >= {"passwords.json", "client.properties", "connect-rest.json"}
    loose = {str(path.relative_to(local.home)): oct(stat.S_IMODE(path.stat().st_mode)) for path in holding
             if stat.S_IMODE(path.stat().st_mode) != 0o600}  # fmt: skip
    assert loose == {}
    folders = {
        folder
        for path in holding
        for folder in (path.parent, *path.parent.parents)
        if folder.is_relative_to(local.home) and folder != local.home  # the home was made 0755 before (fixture)
    }
    open_folders = {str(folder): oct(stat.S_IMODE(folder.stat().st_mode)) for folder in folders
                    if stat.S_IMODE(folder.stat().st_mode) != 0o700}  # fmt: skip
    assert open_folders == {}


def _readable_by_others(path: Path, home: Path) -> bool:
    """Another local user may read ``path``: it is readable to others and every folder of the home down to it
    lets them through (the folders above the home are the test's own, 0700)."""
    if not stat.S_IMODE(path.stat().st_mode) & 0o004:
        return False
    folders = [folder for folder in path.parents if folder.is_relative_to(home)]
    return all(stat.S_IMODE(folder.stat().st_mode) & 0o001 for folder in folders)


def test_no_file_of_the_stack_is_readable_by_another_user_on_an_open_home(
    secured: tuple[LocalStack, list[list[str]]],
) -> None:
    local, _ = secured
    assert stat.S_IMODE(local.home.stat().st_mode) & 0o005 == 0o005  # the home stayed open: the folders below close
    files = [path for path in local.home.rglob("*") if path.is_file() and not path.is_symlink()]
    segments = [path for path in files if path.suffix == ".log" and path.stem.isdigit()]
    assert segments, "the walk must reach the brokers' segment files"
    exposed = []
    for path in files:
        try:
            if _readable_by_others(path, local.home):
                exposed.append(str(path.relative_to(local.home)))
        except FileNotFoundError:  # a file the live broker replaced while the walk ran
            continue
    assert exposed == []


def test_no_secret_on_a_command_line(secured: tuple[LocalStack, list[list[str]]]) -> None:
    local, commands = secured
    secrets = _secrets(local)
    live = processes.stack_processes(local.home)
    assert set(live) >= {"broker", "connect"}
    command_lines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pids in live.values() for pid in pids}
    assert all(command_lines.values())  # every process is still there and its command line was read
    assert [pid for pid, line in command_lines.items() if any(secret in line for secret in secrets)] == []
    # the short-lived ones are gone by now: what the stack ran, as it ran it (the storage format among them)
    assert any("kafka.tools.StorageTool" in command for command in commands)
    leaked = [command for command in commands if any(secret in " ".join(command).encode() for secret in secrets)]
    assert [next(arg for arg in command if arg.startswith(("kafka.", "org."))) for command in leaked] == []

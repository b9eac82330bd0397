"""Starting, finding and stopping the stack's JVMs.

Every JVM ikkai starts carries two system properties on its command line,
``-Dikkai.stack=<home>`` and ``-Dikkai.component=<name>``. They are the identity of the
process: ``stack_processes`` finds them by their command lines (psutil lists them), so a
lost pid file, a reused pid or a crashed CLI can never make ikkai stop a stranger's process or
miss one of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

STACK_PROPERTY = "-Dikkai.stack="
COMPONENT_PROPERTY = "-Dikkai.component="
# A process whose main thread has exited: its exit status not yet collected, or being torn down.
EXITED = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


def identity_options(home: Path, component: str) -> list[str]:
    return [f"{STACK_PROPERTY}{home}", f"{COMPONENT_PROPERTY}{component}"]


def _cmdline(pid: int) -> list[str]:
    """The command line of ``pid``; empty once it is gone or a zombie (its command line reads empty then)."""
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def _is_zombie(pid: int) -> bool:
    """True if ``pid``'s main thread has exited (zombie) or ``pid`` is gone."""
    try:
        return psutil.Process(pid).status() in EXITED
    except psutil.Error:
        return True


def has_exited(pid: int) -> bool:
    """True once every thread of ``pid`` has exited, so its files are closed and its ports free.

    The main thread of a killed JVM turns zombie, and its command line reads empty, while its
    other threads are still exiting and holding its sockets; only after those is it gone (a
    zombie that counts no thread but its main one).
    """
    _reap(pid)
    try:
        process = psutil.Process(pid)
        return process.status() in EXITED and process.num_threads() <= 1
    except psutil.Error:
        return True


def wait_exited(pids: Sequence[int], timeout: float) -> bool:
    """Wait until ``has_exited`` holds for every pid. False if one is still there after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not all(has_exited(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status of a child of ours, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stack_processes(home: Path) -> dict[str, list[int]]:
    """Live processes of the stack rooted at ``home``, by component name."""
    marker = f"{STACK_PROPERTY}{home}"
    found: dict[str, list[int]] = {}
    for process in psutil.process_iter(["pid", "cmdline"]):
        pid: int = process.info["pid"]
        args: list[str] = process.info["cmdline"] or []
        if marker not in args:
            continue
        _reap(pid)
        if _is_zombie(pid):
            continue
        component = next((a[len(COMPONENT_PROPERTY) :] for a in args if a.startswith(COMPONENT_PROPERTY)), "?")
        found.setdefault(component, []).append(pid)
    return found


def is_alive(pid: int, home: Path, component: str) -> bool:
    _reap(pid)
    args = _cmdline(pid)
    return not _is_zombie(pid) and f"{STACK_PROPERTY}{home}" in args and f"{COMPONENT_PROPERTY}{component}" in args


def start_java(
    java: Path,
    *,
    home: Path,
    component: str,
    main_class: str,
    classpath: str,
    args: Sequence[str],
    jvm_options: Sequence[str],
    output: Path,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a detached JVM (its own session, stdin closed, output to a file).

    The caller watches start-up through the returned handle: right after exec, the new
    command line may not show yet, so identity checks are only for processes found later.
    """
    command = [
        str(java), *jvm_options, *identity_options(home, component),
        "-cp", classpath, main_class, *args,
    ]  # fmt: skip
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("ab") as out:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=home,
            env=dict(env) if env is not None else None,
        )
    return process


def run_java(
    java: Path, *, classpath: str, main_class: str, args: Sequence[str], jvm_options: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Run a short-lived Java tool (the storage formatter) and capture its output."""
    return subprocess.run(
        [str(java), *jvm_options, "-cp", classpath, main_class, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def stop(pid: int, home: Path, component: str, *, grace_seconds: float) -> bool:
    """TERM the process group, then KILL it after ``grace_seconds``; return once it has exited
    (``has_exited``, within 10 s of the KILL). True if it needed KILL."""
    if not is_alive(pid, home, component):
        return False
    killed = stop_groups([pid], grace_seconds=grace_seconds, running=lambda p: is_alive(p, home, component))
    return bool(killed)


def stop_groups(
    pids: Sequence[int], *, grace_seconds: float, running: Callable[[int], bool] = lambda p: not has_exited(p)
) -> list[int]:
    """TERM each process group, KILL those still ``running`` after ``grace_seconds``, and return once all have
    exited (``has_exited``, within 10 s of the KILL); the pids that needed KILL."""
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)  # a bounded wait for them to exit, polled
    killed = [pid for pid in pids if running(pid)]
    for pid in killed:
        signal_group(pid, signal.SIGKILL)
    wait_exited(list(pids), 10)
    return killed


def signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass

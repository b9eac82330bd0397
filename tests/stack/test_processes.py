"""A killed component counts as gone only once every thread of it has exited and its ports are free.

A JVM killed with SIGKILL loses its main thread first: /proc then shows a zombie with an empty
command line while its other threads are still exiting and holding its listening socket. A
restart on the recorded port right then would find the port taken by the dead worker itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stack.ports import free_port, port_is_free
from stack.processes import has_exited, is_alive, wait_exited

# The main thread exits (pthread_exit) while a second thread keeps the process, and its listener, until stdin closes.
MAIN_THREAD_EXITS_FIRST = """
import ctypes, socket, sys, threading
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen()
threading.Thread(target=sys.stdin.read).start()
print("listening", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_process_is_not_gone_while_a_thread_still_holds_its_port() -> None:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", MAIN_THREAD_EXITS_FIRST, str(port), "-Dikkai.stack=x", "-Dikkai.component=connect"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "listening\n"
        assert not wait_exited([child.pid], 0.5)
        assert not is_alive(child.pid, Path("x"), "connect"), "the command line is gone already"
        assert not has_exited(child.pid) and not port_is_free(port), "but a thread still holds the port"
        assert child.stdin is not None
        child.stdin.close()
        assert wait_exited([child.pid], 10)
        assert has_exited(child.pid) and port_is_free(port)
    finally:
        child.kill()
        child.wait(10)

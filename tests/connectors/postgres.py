"""A throw-away PostgreSQL server for the CDC test: its own data folder, port and logical WAL.

Started from the Debian packages' binaries (``apt-get install postgresql``; .ci/run installs
them where missing). PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` user. Authentication is ``trust`` on 127.0.0.1 only: the test is about CDC, and
the connector still reads its password through a config-provider placeholder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deploy.ports import free_port


def postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass(frozen=True)
class Postgres:
    bin: Path
    port: int
    as_user: tuple[str, ...]

    def sql(self, statement: str, database: str = "postgres") -> str:
        result = subprocess.run(
            [
                *self.as_user,
                str(self.bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-qAt",
                "-c",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"psql failed: {result.stderr.strip()}")
        return result.stdout


@contextmanager
def temporary_postgres(bin_dir: Path) -> Iterator[Postgres]:
    root = Path(tempfile.mkdtemp(prefix="ikkai-pg-"))
    as_user: tuple[str, ...] = ("runuser", "-u", "postgres", "--") if os.geteuid() == 0 else ()
    if as_user:
        shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", free_port()
    options = (
        f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c wal_level=logical "
        "-c max_wal_senders=10 -c max_replication_slots=10 -c fsync=off"
    )
    run = lambda *args: subprocess.run([*as_user, *args], capture_output=True, text=True, timeout=120, check=True)  # noqa: E731
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-o", options, "start")
        yield Postgres(bin_dir, port, as_user)
    finally:
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)

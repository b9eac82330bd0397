"""A throw-away PostgreSQL server for the CDC tests: its own data folder, port and logical WAL.

Started from the Debian packages' binaries (``apt-get install postgresql``; .ci/run installs
them where missing). PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` user. Authentication is ``trust`` on 127.0.0.1 only: the test is about CDC, and
the connector still reads its password through a config-provider placeholder.

``payments_table_ddl`` is the table the postgres-cdc bundle documents, ``cdc_values`` the values
file that points a copy of the bundle at this server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_jobs.enrich.parse import RAW_FIELDS
from stack.ports import free_port

CDC_BUNDLE = Path(__file__).resolve().parents[2] / "connectors" / "bundles" / "postgres-cdc"
PAYMENTS_TABLE = CDC_BUNDLE / "payments-table.sql"
COLUMNS = RAW_FIELDS  # the table's columns are the enrich job's raw fields


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


def payments_table_ddl(name: str) -> str:
    """The shipped payments table (postgres-cdc/payments-table.sql) under the name ``name``."""
    ddl, count = re.subn(r"(CREATE TABLE|ON) payments\b", rf"\1 {name}", PAYMENTS_TABLE.read_text())
    assert count == 2, f"{PAYMENTS_TABLE}: expected 'CREATE TABLE payments' and its trigger 'ON payments'"
    return ddl


def payment_row(payment_id: str, event_id: str, amount: str, event_time: str, **other: object) -> dict[str, object]:
    """A valid payment as a row of the payments table (the enrich job's raw fields)."""
    return {
        "payment_id": payment_id, "event_id": event_id, "customer_id": "cust-00001", "merchant_id": "m-1",
        "amount": amount, "currency": "EUR", "country": "DE", "card_present": True, "channel": "pos",
        "card_number": "4111111111111111", "merchant_category_code": "5411", "status": "authorized",
        "event_time": event_time, **other,
    }  # fmt: skip


def insert_rows(postgres: Postgres, table: str, *rows: dict[str, object], database: str = "payments") -> None:
    def literal(value: object) -> str:
        return str(value).lower() if isinstance(value, bool) else f"'{value}'"

    values = ", ".join("(" + ", ".join(literal(r[c]) for c in COLUMNS) + ")" for r in rows)
    postgres.sql(f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES {values}", database)  # noqa: S608 - test data


def cdc_values(postgres: Postgres, table: str, slot: str, secrets_dir: Path, partitions: int) -> dict[str, object]:
    """postgres-cdc values capturing ``table`` on ``postgres``; the password only as a file placeholder."""
    secrets = secrets_dir / "postgres.properties"
    secrets.write_text("password=not-checked-under-trust-auth\n")
    secrets.chmod(0o600)
    return {
        "slot": slot,
        "partitions": partitions,
        "tables": [{"name": table, "key": "payment_id"}],
        "database": {"port": postgres.port, "user": "postgres", "password": f"${{file:{secrets}:password}}"},
    }


@contextmanager
def postgres_or_skip() -> Iterator[Postgres]:
    """A temporary server from the installed binaries; the test is skipped where there are none."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed here (Debian: apt-get install postgresql; .ci/run does it)")
    with temporary_postgres(bin_dir) as server:
        yield server


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

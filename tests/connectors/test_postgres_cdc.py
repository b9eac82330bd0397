"""The postgres-cdc bundle against a real PostgreSQL and the real worker: snapshot and streamed
changes land in ingest.<table>, keyed by the business id, the password only as a placeholder."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest
from deploy.connect_rest import ConnectClient
from ikkai.settings import Endpoints
from tests.connectors.postgres import Postgres, postgres_bin, temporary_postgres
from tests.kafka_helpers import read_all

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed here (Debian: apt-get install postgresql; .ci/run does it)")
    with temporary_postgres(bin_dir) as server:
        yield server


def test_snapshot_and_streamed_rows_land_in_ingest_table_keyed_by_business_id(
    stack: Endpoints, postgres: Postgres, shipped_bundle: Callable[[str, str], Path], tmp_path: Path
) -> None:
    hex_ = uuid.uuid4().hex[:8]
    table = f"payments_{hex_}"
    postgres.sql("CREATE DATABASE payments")
    postgres.sql(f"CREATE TABLE {table} (payment_id text PRIMARY KEY, amount numeric(12, 2) NOT NULL)", "payments")
    postgres.sql(f"INSERT INTO {table} VALUES ('p-1', 10.00), ('p-2', 7.50)", "payments")  # noqa: S608 - test-made name
    secrets = tmp_path / "postgres.properties"
    secrets.write_text("password=not-checked-under-trust-auth\n")
    secrets.chmod(0o600)

    folder = shipped_bundle("postgres-cdc", f"cdc-{hex_}.")
    values = {
        "slot": f"ikkai_{hex_}",
        "tables": [{"name": table, "key": "payment_id"}],
        "database": {"port": postgres.port, "user": "postgres", "password": f"${{file:{secrets}:password}}"},
    }
    (folder / "values" / "ci.yaml").write_text(yaml.safe_dump(values))
    request = BundleRequest(str(folder), "ci", connect_url=stack.connect_url)
    client = ConnectClient(stack.connect_url)
    name = f"cdc-{hex_}.payments-db"
    try:
        result = bundle_ops.apply_data(request)
        assert result["states"] == {name: "RUNNING"}
        stored = client.connector_config(name)["database.password"]
        assert stored == f"${{file:{secrets}:password}}"  # the config topic holds the reference only

        topic = f"ingest.{table}"
        snapshot = read_all(stack.bootstrap_servers, topic, expect=2, timeout=120)
        assert sorted(k for k, _ in snapshot) == [b"p-1", b"p-2"]
        assert {json.loads(v)["after"]["payment_id"]: json.loads(v)["op"] for _, v in snapshot if v} == {
            "p-1": "r",
            "p-2": "r",
        }

        postgres.sql(f"INSERT INTO {table} VALUES ('p-3', 1.25)", "payments")  # noqa: S608 - test-made name
        streamed = read_all(stack.bootstrap_servers, topic, expect=3, timeout=120)
        key, value = streamed[-1]
        assert key == b"p-3" and value is not None
        change = json.loads(value)
        assert (change["op"], change["after"]["payment_id"], change["source"]["table"]) == ("c", "p-3", table)

        again = ConnectClient(stack.connect_url)
        assert bundle_ops.apply_data(request, client=again)["written"] == [] and again.writes == []
    finally:
        if name in client.connectors():
            client.delete_connector(name)

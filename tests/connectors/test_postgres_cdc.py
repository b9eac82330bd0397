"""The postgres-cdc bundle against a real PostgreSQL and the real worker with the real Debezium plugin.

What lands in ``ingest.<table>-db`` is what the enrich job reads: snapshot rows, inserts and updates as
flat JSON lines of the row (Debezium's envelope unwrapped in Connect), a delete as a ``null`` value with
the header ``__op: d``; every record keyed by the business id, the password only as a placeholder.
(tests/spark_jobs/enrich/test_cdc.py follows these records through the enrich and infer jobs.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer

from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest
from deploy.connect_rest import ConnectClient
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.partitioning import kafka_partition
from ikkai.settings import Endpoints
from stack.kit.topic_io import read_all, unique
from tests.connectors.postgres import (
    Postgres,
    cdc_values,
    insert_rows,
    payment_row,
    payments_table_ddl,
    postgres_or_skip,
)

pytestmark = pytest.mark.integration

PARTITIONS = 2
Landed = tuple[int, bytes | None, bytes | None, dict[str, bytes]]  # partition, key, value, headers


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with postgres_or_skip() as server:
        server.sql("CREATE DATABASE payments")
        yield server


def read_with_headers(bootstrap: str, topic: str, expect: int) -> list[Landed]:
    """(partition, key, value, headers) of the first ``expect`` committed records, per partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("test.cdc"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe([topic])
    seen: list[Landed] = []
    try:
        for _ in range(240):  # a bound on polls, not an assertion: the count is checked by the caller
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen.append((message.partition() or 0, message.key(), message.value(), dict(message.headers() or [])))
                if len(seen) == expect:
                    break
    finally:
        consumer.close()
    return seen


def test_rows_land_unwrapped_in_their_own_ingest_topic_keyed_by_business_id(
    stack: Endpoints,
    cluster: KafkaContext,
    postgres: Postgres,
    shipped_bundle: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    hex_ = uuid.uuid4().hex[:8]
    table = f"payments_{hex_}"
    postgres.sql(payments_table_ddl(table), "payments")
    snapshot = [
        payment_row("p-1", "e-1", "10.00", "2026-01-05T10:00:00.123Z"),
        payment_row("p-2", "e-2", "7.5", "2026-01-05T10:00:01Z"),
    ]
    insert_rows(postgres, table, *snapshot)

    folder = shipped_bundle("postgres-cdc", f"cdc-{hex_}.")
    values = cdc_values(postgres, table, f"ikkai_{hex_}", tmp_path, PARTITIONS)
    (folder / "values" / "ci.yaml").write_text(yaml.safe_dump(values))
    request = BundleRequest(str(folder), "ci", connect_url=stack.connect_url)
    client = ConnectClient(stack.connect_url)
    name = f"cdc-{hex_}.payments-db"
    try:
        result = bundle_ops.apply_data(request)
        assert result["states"] == {name: "RUNNING"}
        stored = client.connector_config(name)["database.password"]
        assert stored == values["database"]["password"]  # type: ignore[index] # the config topic holds the reference only

        topic = f"ingest.{table}-db"
        assert {k for k, _ in read_all(cluster, topic, expect=2, timeout=120)} == {b"p-1", b"p-2"}
        insert_rows(postgres, table, payment_row("p-3", "e-3", "1.25", "2026-01-05T10:00:02Z"))
        postgres.sql(f"UPDATE {table} SET status = 'captured' WHERE payment_id = 'p-1'", "payments")  # noqa: S608
        postgres.sql(f"DELETE FROM {table} WHERE payment_id = 'p-2'", "payments")  # noqa: S608

        landed = read_with_headers(stack.bootstrap_servers, topic, expect=5)
        by_key: dict[bytes, list[tuple[bytes | None, dict[str, bytes]]]] = {}
        for partition, key, value, headers in landed:
            assert key is not None and partition == kafka_partition(key, PARTITIONS)  # Kafka's default partitioner
            by_key.setdefault(key, []).append((value, headers))
        assert sorted(by_key) == [b"p-1", b"p-2", b"p-3"] and len(landed) == 5

        def flat(value: bytes | None) -> dict[str, object]:
            assert value is not None
            document: dict[str, object] = json.loads(value)
            lsn = document.pop("__lsn")
            assert isinstance(lsn, int) and lsn > 0
            return document

        (p1, p1_headers), (p1_update, _) = by_key[b"p-1"]
        expected_p1 = {**snapshot[0], "amount": "10.000", "__op": "r"}
        assert flat(p1) == expected_p1 and p1_headers["__op"] == b"r"
        assert flat(p1_update) == {**expected_p1, "status": "captured", "__op": "u"}  # the whole row, same event_id
        (p2, _), (p2_delete, p2_delete_headers) = by_key[b"p-2"]
        assert flat(p2) == {**snapshot[1], "amount": "7.500", "event_time": "2026-01-05T10:00:01.000Z", "__op": "r"}
        assert (p2_delete, p2_delete_headers["__op"]) == (b"null", b"d")  # a delete: no row, said in a header
        [(p3, _)] = by_key[b"p-3"]
        assert flat(p3)["__op"] == "c" and flat(p3)["event_time"] == "2026-01-05T10:00:02.000Z"

        again = ConnectClient(stack.connect_url)
        assert bundle_ops.apply_data(request, client=again)["written"] == [] and again.writes == []
    finally:
        if name in client.connectors():
            client.delete_connector(name)


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ("event_time = '2026-01-05T11:00:00Z'", "event_time changes only with a new event_id"),
        ("event_id = 'e-9', event_time = '2026-01-05T09:00:00Z'", "a new event_id needs a newer event_time"),
        ("payment_id = 'p-9'", "payment_id never changes"),
    ],
)
def test_the_table_refuses_updates_that_would_change_an_events_identity(
    postgres: Postgres, change: str, refusal: str
) -> None:
    """What docs/cdc.md asks of the table's writers, the shipped table enforces; a status in place is fine."""
    table = f"payments_{uuid.uuid4().hex[:8]}"
    postgres.sql(payments_table_ddl(table), "payments")
    insert_rows(postgres, table, payment_row("p-1", "e-1", "10.00", "2026-01-05T10:00:00Z"))
    with pytest.raises(RuntimeError, match=refusal):
        postgres.sql(f"UPDATE {table} SET {change} WHERE payment_id = 'p-1'", "payments")  # noqa: S608 - test-made
    postgres.sql(f"UPDATE {table} SET status = 'captured' WHERE payment_id = 'p-1'", "payments")  # noqa: S608
    next_event = "event_id = 'e-2', event_time = '2026-01-05T10:00:01Z', status = 'refunded'"
    postgres.sql(f"UPDATE {table} SET {next_event} WHERE payment_id = 'p-1'", "payments")  # noqa: S608
    assert postgres.sql(f"SELECT event_id, status FROM {table}", "payments").split() == ["e-2|refunded"]  # noqa: S608

"""The CDC path end to end: PostgreSQL rows → Debezium (postgres-cdc bundle) → ingest.<table>-db → enrich → infer.

Real PostgreSQL, the real Connect worker with the real Debezium plugin, the bundle applied as the CLI
does, then the enrich job (exactly-once, available-now, ``--input`` the CDC topic) and the infer job
as their own processes. What counts is what read_committed consumers see: each payment event once in
the events topic and once in the decisions topic; an UPDATE that keeps the row's event_id is the same
event (dead-lettered ``duplicate``, no second decision), one that writes a new event_id is the
payment's next event; a DELETE is dead-lettered ``not_an_object`` with the raw ``null`` and the key.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.infer_process import InferProcess, InferTopics
from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest
from deploy.connect_rest import ConnectClient
from ikkai.contract.codec import default_codec
from ikkai.contract.ids import decision_id
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.master_data import CustomerProfile, MerchantProfile, publish_profiles
from stack.kit.topic_io import by_partition, create_topic, flat, read_all, unique
from tests.connectors.postgres import (
    CDC_BUNDLE,
    Postgres,
    cdc_values,
    insert_rows,
    payment_row,
    payments_table_ddl,
    postgres_or_skip,
)
from tests.spark_jobs.enrich_process import EnrichProcess, EnrichTopics

pytestmark = pytest.mark.integration

PARTITIONS = 2
BEFORE_EVENTS = 1_767_225_600_000  # 2026-01-01: every profile version is valid before the rows' event times


@dataclass(frozen=True)
class CdcRun:
    """What read_committed consumers see after the rows went through Connect, enrich and infer."""

    input_topic: str
    ingested: int
    events: list[tuple[bytes | None, dict[str, Any]]]  # (Kafka key, payment_event)
    dead_letters: list[dict[str, Any]]
    decisions: list[dict[str, Any]]


def apply_bundle(stack: Endpoints, postgres: Postgres, hex_: str, table: str, folder: Path) -> dict[str, str]:
    """A copy of the shipped postgres-cdc bundle with its own owner prefix and slot, applied to ``table``."""
    shutil.copytree(CDC_BUNDLE, folder)
    manifest = yaml.safe_load((folder / "bundle.yaml").read_text())
    manifest["owner_prefix"] = f"cdc-{hex_}."
    (folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    values = cdc_values(postgres, table, f"ikkai_{hex_}", folder, PARTITIONS)
    (folder / "values" / "ci.yaml").write_text(yaml.safe_dump(values))
    return dict(bundle_ops.apply_data(BundleRequest(str(folder), "ci", connect_url=stack.connect_url))["states"])


def decoded(cluster: KafkaContext, topic: str, schema: str) -> list[tuple[bytes | None, dict[str, Any]]]:
    codec = default_codec()
    records = flat(by_partition(cluster, topic))
    assert all(value is not None for _, value in records)  # the jobs write no tombstones
    return [(key, codec.decode(schema, value)) for key, value in records if value is not None]


@pytest.fixture(scope="module")
def cdc_run(stack: Endpoints, cluster: KafkaContext, tmp_path_factory: pytest.TempPathFactory) -> CdcRun:
    """Two rows in the initial snapshot; then two inserts, two updates and a delete; then enrich and infer once."""
    bootstrap, tmp_path = stack.bootstrap_servers, tmp_path_factory.mktemp("cdc")
    hex_, name = uuid.uuid4().hex[:8], unique("cdc")
    table, connector = f"payments_{hex_}", f"cdc-{hex_}.payments-db"
    enrich_topics = EnrichTopics(f"ingest.{table}-db", f"events.{name}", f"dlq.{name}",
                                 f"masterdata.merchants.{name}", f"masterdata.customers.{name}")  # fmt: skip
    infer_topics = InferTopics(enrich_topics.events, f"decisions.{name}", f"outbox.{name}", f"dlq.infer.{name}")
    for topic in (enrich_topics.events, enrich_topics.dlq, infer_topics.decisions, infer_topics.outbox,
                  infer_topics.dlq):  # fmt: skip
        create_topic(cluster, topic, PARTITIONS)
    publish_profiles(
        KafkaContext.from_environment(bootstrap), [MerchantProfile("m-1", BEFORE_EVENTS, "Corner Shop", "DE", "low")],
        [CustomerProfile("cust-00001", BEFORE_EVENTS, "retail", "DE")],
        merchants_topic=enrich_topics.merchants, customers_topic=enrich_topics.customers,
        transactional_id=unique("test.masterdata"),
    )  # fmt: skip

    client = ConnectClient(stack.connect_url)
    with postgres_or_skip() as postgres:
        postgres.sql("CREATE DATABASE payments")
        postgres.sql(payments_table_ddl(table), "payments")
        insert_rows(postgres, table, payment_row("p-1", "e-1", "10.00", "2026-01-05T10:00:00.100Z"),
                    payment_row("p-2", "e-2", "7.50", "2026-01-05T10:00:01Z"))  # fmt: skip
        try:
            assert apply_bundle(stack, postgres, hex_, table, tmp_path / "postgres-cdc") == {connector: "RUNNING"}
            assert len(read_all(cluster, enrich_topics.input, expect=2, timeout=120)) == 2  # the snapshot
            insert_rows(postgres, table, payment_row("p-3", "e-3", "1.25", "2026-01-05T10:00:02Z"),
                        payment_row("p-4", "e-4", "1500", "2026-01-05T10:00:03Z", currency="JPY"))  # fmt: skip
            for statement in (  # the same event again (e-1 kept); the payment's next event; a delete
                "UPDATE <t> SET status = 'captured' WHERE payment_id = 'p-1'",
                "UPDATE <t> SET status = 'captured', event_id = 'e-3-captured', event_time = '2026-01-05T10:00:04Z' "
                "WHERE payment_id = 'p-3'",
                "DELETE FROM <t> WHERE payment_id = 'p-2'",
            ):
                postgres.sql(statement.replace("<t>", table), "payments")
            ingested = len(read_all(cluster, enrich_topics.input, expect=7, timeout=120))
            assert ingested == 7  # 2 snapshot rows, 2 inserts, 2 updates, 1 delete
        finally:
            if connector in client.connectors():
                client.delete_connector(connector)

    enrich = EnrichProcess(cluster, enrich_topics, tmp_path / "enrich", unique("enrich-cdc"))
    assert enrich.wait() == 0, enrich.tail()
    infer = InferProcess(cluster, infer_topics, tmp_path / "infer", unique("infer-cdc"))
    assert infer.wait() == 0, infer.tail()
    return CdcRun(
        enrich_topics.input, ingested, decoded(cluster, enrich_topics.events, "payment_event"),
        [letter for _, letter in decoded(cluster, enrich_topics.dlq, "dead_letter")],
        [decision for _, decision in decoded(cluster, infer_topics.decisions, "fraud_decision")],
    )  # fmt: skip


def test_each_payment_event_is_in_the_events_topic_once_an_update_in_place_is_not(cdc_run: CdcRun) -> None:
    assert len(cdc_run.events) + len(cdc_run.dead_letters) == cdc_run.ingested  # in = out + DLQ
    assert Counter(e["event_id"] for _, e in cdc_run.events) == Counter(["e-1", "e-2", "e-3", "e-4", "e-3-captured"])
    by_event = {e["event_id"]: e for _, e in cdc_run.events}
    assert all(key == e["payment_id"].encode() for key, e in cdc_run.events)
    assert (by_event["e-1"]["payment_id"], by_event["e-1"]["status"]) == ("p-1", "authorized")  # not the update's
    assert (by_event["e-3-captured"]["payment_id"], by_event["e-3-captured"]["status"]) == ("p-3", "captured")
    assert [by_event[e]["amount_minor"] for e in ("e-1", "e-2", "e-3", "e-4")] == [1000, 750, 125, 1500]
    assert by_event["e-1"]["event_time"] == 1_767_607_200_100  # 2026-01-05T10:00:00.100Z, from timestamptz(3)
    assert all(e["card_masked"] == "************1111" and e["merchant_risk_tier"] == "low" for _, e in cdc_run.events)


def test_the_update_in_place_and_the_delete_are_dead_letters_keyed_by_payment_id(cdc_run: CdcRun) -> None:
    letters = cdc_run.dead_letters
    assert sorted((d["key"], d["error_class"]) for d in letters) == [(b"p-1", r.DUPLICATE), (b"p-2", r.NOT_AN_OBJECT)]
    for d in letters:
        assert (d["source_topic"], d["stage"]) == (cdc_run.input_topic, "enrich") and d["reason"]
    update = next(d for d in letters if d["key"] == b"p-1")
    assert json.loads(update["value"])["__op"] == "u" and '"e-1"' in update["reason"]
    assert next(d["value"] for d in letters if d["key"] == b"p-2") == b"null"  # the delete, traceable by its key


def test_each_event_gets_one_decision_the_update_in_place_none(cdc_run: CdcRun) -> None:
    events = {e["event_id"]: e for _, e in cdc_run.events}
    assert Counter(d["event_id"] for d in cdc_run.decisions) == Counter(list(events))
    for d in cdc_run.decisions:
        assert d["decision_id"] == decision_id(d["payment_id"], d["event_id"], d["model_version"])
        assert d["payment_id"] == events[d["event_id"]]["payment_id"]

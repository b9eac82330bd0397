"""The local schema registry: built from Maven Central, on a free loopback port, in memory, stopped clean."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from confluent_kafka import Producer
from fastavro.schema import to_parsing_canonical_form

from deploy.connect_rest import ConnectClient
from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.registry import RegistryCodec
from ikkai.errors import IkkaiError
from ikkai.settings import Endpoints, jars_dir
from stack.kit.topic_io import create_topic, unique
from stack.local_stack import LocalStack
from stack.ports import port_is_free
from stack.processes import stack_processes
from stack.schema_registry import (
    CCOMPAT_PATH,
    REGISTRY,
    LocalSchemaRegistry,
    avro_converter_config,
    ensure_registry_converter,
)
from tests.connect_helpers import wait_running
from tests.registry_helpers import running_registry

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

SUBJECT = "events.payments-value"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
PAYMENT = {
    "event_id": "evt-1",
    "payment_id": "pay-1",
    "customer_id": "cust-1",
    "merchant_id": "m-1",
    "amount_minor": 12_345,
    "currency": "EUR",
    "country": "DE",
    "card_present": False,
    "event_time": 1_767_225_600_000,
}
CONTENT_TYPE = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSchemaRegistry]:
    with running_registry(tmp_path_factory.mktemp("registry")) as started:
        yield started


def url_of(registry: LocalSchemaRegistry) -> str:
    url = registry.url()
    assert url is not None
    return url


def test_listens_on_loopback_with_the_confluent_api(registry: LocalSchemaRegistry) -> None:
    url = url_of(registry)
    assert url.startswith("http://127.0.0.1:") and url.endswith(CCOMPAT_PATH)
    status = registry.status()
    assert status.healthy and len(status.pids) == 1
    assert registry.up() == url, "a second up is a no-op on the same port"
    assert registry.status().pids == status.pids, "a second up starts nothing"


def test_registers_payment_event_and_reads_it_back(registry: LocalSchemaRegistry) -> None:
    url = url_of(registry)
    schema = default_codec().catalog.get("payment_event").schema
    body = json.dumps({"schema": json.dumps(schema, indent=2)})
    registered = requests.post(f"{url}/subjects/{SUBJECT}/versions", data=body, headers=CONTENT_TYPE, timeout=10)
    assert registered.status_code == 200, registered.text
    schema_id = registered.json()["id"]

    again = requests.post(f"{url}/subjects/{SUBJECT}/versions", data=body, headers=CONTENT_TYPE, timeout=10)
    assert again.json()["id"] == schema_id, "registering the same schema again is a no-op"

    assert SUBJECT in requests.get(f"{url}/subjects", timeout=10).json()
    latest = requests.get(f"{url}/subjects/{SUBJECT}/versions/latest", timeout=10).json()
    assert (latest["subject"], latest["version"], latest["id"]) == (SUBJECT, 1, schema_id)
    by_id = requests.get(f"{url}/schemas/ids/{schema_id}", timeout=10).json()
    # Exactly the schema registered, fields in their order (the order is the binary layout).
    assert to_parsing_canonical_form(json.loads(by_id["schema"])) == to_parsing_canonical_form(schema)


def test_down_stops_the_process_frees_the_port_and_forgets_every_schema(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_registry(home) as registry:
        url = url_of(registry)
        port = int(url.split(":")[2].split("/")[0])
        schema = json.dumps({"schema": json.dumps(default_codec().catalog.get("payment_event").schema)})
        posted = requests.post(f"{url}/subjects/{SUBJECT}/versions", data=schema, headers=CONTENT_TYPE, timeout=10)
        assert posted.status_code == 200, posted.text

        stopped = registry.down()
        assert stopped and not stack_processes(home.resolve()).get(REGISTRY)
        assert port_is_free(port)

        assert registry.up() == url, "the port is kept across down/up"
        assert requests.get(f"{url}/subjects", timeout=10).json() == [], "storage is in memory only"


# -- Kafka Connect reads what ikkai wrote -----------------------------------------------------------


@pytest.fixture(scope="module")
def connect_with_converter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Endpoints, str]]:
    """An embedded stack whose worker has the registry's converter on plugin.path, and a registry, in one home."""
    home = tmp_path_factory.mktemp("stack")
    try:
        plugin = ensure_registry_converter(jars_dir())
    except IkkaiError as exc:
        pytest.skip(f"the registry's converter cannot be resolved here: {exc}")
    stack = LocalStack(home, jars_dir(), extra_plugin_dirs=(plugin,), progress=sys.stderr)
    try:
        endpoints = stack.up()
    except IkkaiError as exc:
        stack.down()
        pytest.skip(f"the embedded stack cannot start here: {exc}")
    try:
        with running_registry(home) as registry:
            url = registry.url()
            assert url is not None
            yield endpoints, url
    finally:
        stack.down()


def test_a_sink_with_the_registry_converter_reads_records_our_codec_wrote(
    connect_with_converter: tuple[Endpoints, str], tmp_path: Path
) -> None:
    endpoints, registry_url = connect_with_converter
    topic = create_topic(KafkaContext.recorded(endpoints), unique("events.payments"))
    codec = RegistryCodec(default_codec().catalog, {"url": registry_url}, subjects={"payment_event": f"{topic}-value"})
    producer = Producer(KafkaContext.recorded(endpoints).producer_config())
    for i in range(3):
        payment = {**PAYMENT, "payment_id": f"pay-{i}", "event_id": f"evt-{i}", "amount_minor": 100 + i}
        producer.produce(topic, key=f"pay-{i}".encode(), value=codec.encode("payment_event", payment))
    assert producer.flush(30) == 0

    out = tmp_path / "sink.txt"
    client = ConnectClient(endpoints.connect_url)
    name = unique("registry-sink")
    client.create_connector(
        name,
        {
            "connector.class": FILE_SINK,
            "tasks.max": "1",
            "topics": topic,
            "file": str(out),
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            **avro_converter_config(registry_url),
            "consumer.override.isolation.level": "read_committed",
            "consumer.override.auto.offset.reset": "earliest",
        },
    )
    try:
        wait_running(client, name)
        lines = wait_lines(client, name, out, 3)
    finally:
        client.delete_connector(name)
    # The converter fetched the writer schema by id and built Connect structs field by field.
    assert [line.startswith("Struct{") for line in lines] == [True] * 3
    for i, line in enumerate(lines):
        assert f"payment_id=pay-{i}," in line and f"amount_minor={100 + i}," in line and "currency=EUR," in line


def wait_lines(client: ConnectClient, name: str, path: Path, count: int, timeout: float = 120) -> list[str]:
    """The sink file's lines once it has ``count``; a failed task fails at once with its trace."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        tasks = client.connector_status(name).get("tasks") or []
        failed = [t for t in tasks if t["state"] == "FAILED"]
        if failed:
            raise AssertionError(f"{name} task failed: {failed[0].get('trace', '')[:2000]}")
        time.sleep(0.5)
    raise AssertionError(f"{path} has {len(lines)} of {count} lines after {timeout}s")

"""A dead letter is confirmed by the broker before its receipt says DEAD_LETTERED, in the shipped configuration.

Issue 44, case 1, on the real worker with the shipped bundle (``errors.log.enable: true``, which gives Connect two
error reporters): the DLQ topic is made to refuse every record (``max.message.bytes`` 512), then a request to an
alias that is not allowed is emitted. The sink writes the dead letter with its own producer and waits for the
broker's answer: refused, so the task stops without committing and no receipt is written. Trusting Connect's
ErrantRecordReporter future instead (which leaves out a reporter already done) wrote DEAD_LETTERED with an empty
DLQ and committed the offset.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from demo.receiver import ReferenceReceiver
from tests.outbox_sink.conftest import SinkFactory, make_request, read_dead_letters

pytestmark = pytest.mark.integration

WAIT = 90.0


def test_a_dead_letter_the_dlq_refuses_is_never_receipted_and_the_task_stops(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(backoff_initial_ms=200, retry_max_duration_ms=10_000)
    admin = AdminClient({"bootstrap.servers": sink.endpoints.bootstrap_servers})
    small = ConfigResource(
        ResourceType.TOPIC,
        sink.dlq_topic,
        incremental_configs=[ConfigEntry("max.message.bytes", "512", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([small])[small].result(30)
    refused = make_request(0, "pay-refused", target="nowhere-api")  # not in the allow-list: a dead letter
    sink.emit([refused])

    receipts = sink.receipts()
    deadline = time.monotonic() + WAIT
    got: dict[str, object] = {}
    while time.monotonic() < deadline and not got and "FAILED" not in sink.task_states():
        got = dict(receipts.wait_for([refused.decision_id], 1.0))

    assert read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1, timeout=3) == []
    assert got == {}, f"a receipt says {got} while the DLQ holds nothing"
    assert sink.task_states() == ["FAILED"], "Kafka refused the dead letter: the task stops, nothing committed"

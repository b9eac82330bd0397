"""A dead letter is confirmed by the broker before its receipt says DEAD_LETTERED, in the shipped configuration.

Issue 44, case 1, on the real worker with the shipped bundle (``errors.log.enable: true``, which gives Connect two
error reporters). A request to an alias that is not allowed is emitted after the dead-letter queue was broken in
one of two ways:

* the DLQ topic refuses every record (``max.message.bytes`` 512): the broker's answer comes later;
* the DLQ topic was deleted after the task started (the stack creates no topic by itself): the producer's send
  gives up after ``max.block.ms`` and hands back a future that is already failed. Connect's ErrantRecordReporter
  leaves such a future out when it has several reporters, and its own future then says "written": trusting it wrote
  DEAD_LETTERED for a dead letter that no reader can ever find, and committed the offset.

The sink writes its dead letters with its own producer and waits for that producer's answer: no receipt, nothing on
the DLQ, and the task stops without committing (Kafka failing is the one thing that may stop it).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from demo.receiver import ReferenceReceiver
from tests.outbox_sink.conftest import DeployedSink, SinkFactory, make_request, read_dead_letters

pytestmark = pytest.mark.integration

WAIT = 180.0  # the producer's max.block.ms (60 s) for a deleted topic, and a loaded machine


def refuse_every_record(admin: AdminClient, sink: DeployedSink) -> None:
    small = ConfigResource(
        ResourceType.TOPIC,
        sink.dlq_topic,
        incremental_configs=[ConfigEntry("max.message.bytes", "512", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([small])[small].result(30)


def delete_topic(admin: AdminClient, sink: DeployedSink) -> None:
    admin.delete_topics([sink.dlq_topic])[sink.dlq_topic].result(30)
    deadline = time.monotonic() + 30
    while sink.dlq_topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the DLQ topic is still listed"
        time.sleep(0.2)


@pytest.mark.parametrize("break_dlq", [refuse_every_record, delete_topic], ids=["refuses", "deleted"])
def test_a_dead_letter_the_dlq_does_not_take_is_never_receipted_and_the_task_stops(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver, break_dlq: object
) -> None:
    sink = outbox_sink(backoff_initial_ms=200, retry_max_duration_ms=10_000)
    admin = AdminClient({"bootstrap.servers": sink.endpoints.bootstrap_servers})
    assert callable(break_dlq)
    break_dlq(admin, sink)
    refused = make_request(0, "pay-refused", target="nowhere-api")  # not in the allow-list: a dead letter
    sink.emit([refused])

    receipts = sink.receipts()
    deadline = time.monotonic() + WAIT
    got: dict[str, object] = {}
    while time.monotonic() < deadline and not got and "FAILED" not in sink.task_states():
        got = dict(receipts.wait_for([refused.decision_id], 1.0))

    on_dlq = []
    if sink.dlq_topic in admin.list_topics(timeout=10).topics:
        on_dlq = read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1, timeout=3)
    assert on_dlq == []
    assert got == {}, f"a receipt says {got} while no reader can find its dead letter"
    assert sink.task_states() == ["FAILED"], "Kafka did not take the dead letter: the task stops, nothing committed"

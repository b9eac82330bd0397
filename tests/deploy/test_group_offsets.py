"""The child-process boundary of the sink groups' offset reads (``deploy.eos_view.group_offsets``): a child that
aborts as librdkafka does (exit 134, SIGABRT) is reported as unreadable with a bounded reason and this process
goes on; over the real broker, a health sample whose child dies shows "consumer lag unreadable: <why>" with the
rest of the sample intact, and the next sample uses a new admin client."""

from __future__ import annotations

import sys
import time

import pytest

from deploy.eos_view import health as health_module
from deploy.eos_view.group_offsets import (
    MAX_REASON,
    GroupOffsetsUnreadable,
    SinkGroups,
    decoded,
    encoded,
    how_it_ended,
    in_child,
)
from deploy.kafka_windows import Deadline
from ikkai.contract.kafka import KafkaContext
from tests.deploy.test_eos_health import marker, new_query, reader_of, write_markers

ASSERTION = "python3: rdkafka_queue.h:165: rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed."
ABORTS = (sys.executable, "-c", f"import os, sys; sys.stderr.write({ASSERTION + ' ' + 'x' * 500!r}); os.abort()")
EXITS_134 = (sys.executable, "-c", "import sys; sys.stderr.write('aborted\\n'); sys.exit(134)")


def test_an_answer_reads_back_as_the_groups_it_names() -> None:
    found = SinkGroups({"connect-outbox-sink": ("STABLE", {("outbox.requests", 0): 12, ("outbox.requests", 1): 3})}, 2)
    assert decoded(encoded(found)) == found
    with pytest.raises(GroupOffsetsUnreadable, match="unreadable: Broker transport failure"):
        decoded('{"problem": "Broker transport failure"}')
    with pytest.raises(GroupOffsetsUnreadable, match="answered no groups"):
        decoded("")


def test_how_a_child_ended_names_the_signal_and_its_last_line_bounded() -> None:
    assert how_it_ended(-6, "a\n" + ASSERTION + "\n") == f"its reading process died, SIGABRT (exit -6): {ASSERTION}"
    assert how_it_ended(134, "") == "its reading process died, SIGABRT (exit 134)"
    assert how_it_ended(1, "Traceback\nValueError: x") == "its reading process died, exit 1: ValueError: x"
    assert len(how_it_ended(-6, "y" * 10_000)) <= MAX_REASON + 60
    said = how_it_ended(1, "KafkaException: https://ikkai:s3cret@broker:9093/?password=s3cret refused")
    assert "s3cret" not in said and "broker:9093" in said  # the page never shows a credential the child printed


@pytest.mark.parametrize(("command", "ended"), [(ABORTS, "SIGABRT (exit -6): python3: rdkafka_queue.h"),
                                                (EXITS_134, "SIGABRT (exit 134): aborted")])  # fmt: skip
def test_a_child_that_aborts_is_unreadable_and_this_process_goes_on(command: tuple[str, ...], ended: str) -> None:
    with pytest.raises(GroupOffsetsUnreadable) as failed:
        in_child({"bootstrap.servers": "127.0.0.1:9"}, command)(Deadline(30), 32)
    assert ended in failed.value.reason
    assert len(failed.value.reason) <= MAX_REASON + 60


@pytest.fixture
def query(bootstrap: str) -> tuple[str, str, str]:
    return new_query(bootstrap)


@pytest.mark.integration
def test_a_sample_whose_child_dies_shows_lag_unreadable_and_the_rest(
    cluster: KafkaContext, query: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, name, topic = query
    write_markers(cluster, topic, [marker(0, 0, app, name)])
    monkeypatch.setattr(health_module, "in_child", lambda config: in_child(config, ABORTS))
    reader = reader_of(cluster.bootstrap_servers, [time.time()])
    health = reader.sampled()
    assert health.lags.problem is not None
    assert health.lags.problem.startswith("consumer lag unreadable: its reading process died, SIGABRT")
    assert [p.partition for p in health.queries[(app, name)]] == [0, 1]  # the rest of the sample is there
    assert health.dead_letters.problem is None
    assert reader._admin is None  # no client lives past a failed sample: the next one makes a new one

"""What the outbox sink retries, for how long, and what it does with a strange Retry-After — on the real worker.

Each interleaving is built on purpose with the reference receiver's faults: a first attempt held
beyond the sink's request timeout (so a repeat finds its key in progress), a Retry-After far past
any retry budget.
"""

from __future__ import annotations

import time

import pytest

from demo.receiver import ReferenceReceiver
from tests.outbox_sink.conftest import SinkFactory, make_request, read_dead_letters

pytestmark = pytest.mark.integration

FAST_RETRIES = {"backoff_initial_ms": 200, "backoff_max_ms": 2_000, "retry_max_duration_ms": 120_000}
WAIT = 120.0


def test_a_409_for_a_key_still_in_progress_is_retried_and_receipted_delivered_once(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver
) -> None:
    sink = outbox_sink(**FAST_RETRIES, http_request_timeout_ms=500)
    # The first attempt is applied but held 4 s, far past the sink's 0.5 s timeout: the sink's
    # repeat finds the key in progress and gets 409, until the first one is done.
    receiver.faults(delay_s=4.0)
    request = make_request(0, "pay-in-progress")
    sink.emit([request])

    receipt = sink.receipts().wait_for([request.decision_id], WAIT)[request.decision_id]

    tries = [d for d in receiver.deliveries() if d.path == "/payments" + request.path]
    assert 409 in [d.status for d in tries], "no repeat met the key in progress; the test proves nothing"
    assert (receipt.outcome, receipt.status_code) == ("DELIVERED", 201)
    assert receipt.attempts >= 3  # timed out, 409 at least once, then the stored answer
    assert tries[-1].replayed and tries[-1].status == 201
    assert [a.path for a in receiver.applied()] == ["/payments" + request.path]
    assert read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1, timeout=3) == []
    assert sink.task_states() == ["RUNNING"]


@pytest.mark.parametrize("retry_after", ["99999999999999999", "9000000000000000000"], ids=["17-digits", "19-digits"])
def test_a_retry_after_beyond_the_budget_dead_letters_that_request_and_the_task_goes_on(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver, retry_after: str
) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    receiver.faults(throttle_requests=1, retry_after=retry_after)
    absurd = make_request(0, "pay-absurd")
    sink.emit([absurd])

    receipts = sink.receipts()
    got = receipts.wait_for([absurd.decision_id], 30)

    assert absurd.decision_id in got, f"no receipt; the task is {sink.task_states()}"
    receipt = got[absurd.decision_id]
    assert (receipt.outcome, receipt.status_code, receipt.attempts) == ("DEAD_LETTERED", 429, 1)
    assert receipt.reason is not None and receipt.reason.startswith("retries-exhausted")
    assert "Retry-After" in receipt.reason
    assert sink.task_states() == ["RUNNING"]
    later = make_request(1, "pay-after-absurd")
    sink.emit([later])
    assert receipts.wait_for([later.decision_id], WAIT)[later.decision_id].outcome == "DELIVERED"
    [dead] = read_dead_letters(sink.endpoints.bootstrap_servers, sink.dlq_topic, expect=1)
    assert dead.headers["ikkai.dlq.error_class"] == "retries-exhausted"


@pytest.mark.parametrize("kind", ["http-date", "garbage"])
def test_an_http_date_retry_after_is_honoured_and_garbage_ignored(
    outbox_sink: SinkFactory, receiver: ReferenceReceiver, kind: str
) -> None:
    sink = outbox_sink(**FAST_RETRIES)
    if kind == "http-date":
        value = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 4))
    else:
        value = "tomorrow, perhaps"
    receiver.faults(throttle_requests=1, retry_after=value)
    request = make_request(0, "pay-dated")
    sink.emit([request])

    receipt = sink.receipts().wait_for([request.decision_id], WAIT)[request.decision_id]

    assert (receipt.outcome, receipt.attempts) == ("DELIVERED", 2)
    tries = [d for d in receiver.deliveries() if d.path == "/payments" + request.path]
    assert [d.status for d in tries] == [429, 201]
    gap = tries[1].received_at - tries[0].received_at
    if kind == "http-date":
        assert gap >= 2.0  # the date has one-second resolution: at least 3 s ahead when sent
    else:
        assert gap < 2.0  # only the backoff (< 0.2 s) was waited

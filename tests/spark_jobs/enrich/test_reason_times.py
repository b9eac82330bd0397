"""Issue 47 item 8: enrich's event-time reasons name ISO-8601 UTC times, so the card mask leaves them readable.

190 of 211 dead-letter reasons read ``event_time *********3265 is 424426 ms behind the partition's watermark
*********7691``: the instants were epoch milliseconds, 13 digits the mask took for card numbers (and the
issue's own example, 1795884189782, passes the Luhn check, so recognising cards by Luhn alone would not save it).
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from deploy.eos_view.dead_letter_reasons import shown_reason
from ikkai.contract.masking import mask_card_numbers
from spark_jobs.enrich import reasons as r
from spark_jobs.enrich.dedupe import EventTimeGate

LATENESS_MS = 10_000
WATERMARK = 1_795_884_614_208  # the issue's example: 424426 ms ahead of the late event
LATE = 1_795_884_189_782


def test_the_issues_late_reason_names_iso_times_and_survives_the_mask_readable() -> None:
    gate = EventTimeGate(LATENESS_MS)
    assert gate.decide("e1", "p1", WATERMARK + LATENESS_MS) is None
    verdict = gate.decide("e2", "p2", LATE)
    assert verdict is not None and verdict[0] == r.LATE
    reason = verdict[1]
    assert reason == (
        "event_time 2026-11-28T16:43:09.782Z is 424426 ms behind the partition's watermark 2026-11-28T16:50:14.208Z "
        "(max event_time 2026-11-28T16:50:24.208Z - lateness 10000 ms)"
    )
    assert mask_card_numbers(reason) == reason
    assert shown_reason(reason) == reason  # as the page's dead-letter table shows it


@given(
    first=st.integers(10**12, 10**13 - 1),
    behind=st.integers(LATENESS_MS + 1, 10**9),
    ids=st.sampled_from(["e1", "pay-000001"]),
)
def test_every_event_time_reason_survives_the_mask_whole(first: int, behind: int, ids: str) -> None:
    """Late, duplicate and stale reasons alike: no epoch milliseconds in them, nothing the mask changes."""
    gate = EventTimeGate(LATENESS_MS)
    gate.decide(ids, ids, first)
    reasons = [gate.decide(ids, ids, first)]  # the same event again: duplicate
    reasons.append(gate.decide(f"{ids}-2", ids, first))  # a new event, same time, same payment: stale
    reasons.append(gate.decide(f"{ids}-3", f"{ids}-3", first - behind))  # late
    for verdict in reasons:
        assert verdict is not None
        assert mask_card_numbers(verdict[1]) == verdict[1]
        assert not re.search(r"\d{13}", verdict[1]), verdict[1]

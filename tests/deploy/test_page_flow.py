"""The flow reader's sampling and rates (deploy/eos_view/flow.py) and the page's chart of them
(deploy/serve/page/charts.py).
The reader against a real cluster is in test_page_browser.py (the flow view)."""

from __future__ import annotations

import re

import pytest

from deploy.eos_view.flow import SAMPLE_SECONDS, FlowReader, Sample, rates
from deploy.serve.page.charts import flow_chart, flow_points
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import EVENTS_PAYMENTS, INGEST_PAYMENTS


class CountingReader(FlowReader):
    """The reader with the cluster replaced by a counter: each read's ingest end offset is 100 more."""

    reads = 0

    def _read(self) -> dict[str, int | None]:
        self.reads += 1
        return {INGEST_PAYMENTS: 100 * self.reads, EVENTS_PAYMENTS: None}


def test_rates_are_offsets_per_second_between_samples() -> None:
    samples = [
        Sample(0.0, {INGEST_PAYMENTS: 0, EVENTS_PAYMENTS: None}),
        Sample(5.0, {INGEST_PAYMENTS: 50, EVENTS_PAYMENTS: 0}),
        Sample(10.0, {INGEST_PAYMENTS: 40, EVENTS_PAYMENTS: 20}),  # a topic recreated: never a negative rate
    ]
    assert rates(samples, INGEST_PAYMENTS) == [10.0, 0.0]
    assert rates(samples, EVENTS_PAYMENTS) == [None, 4.0]
    assert rates(samples[:1], INGEST_PAYMENTS) == []


def test_the_reader_samples_at_most_once_per_interval_and_keeps_a_bounded_window() -> None:
    now = [0.0]
    reader = CountingReader(KafkaContext("127.0.0.1:9"), clock=lambda: now[0])
    for _ in range(5):
        reader.sampled()  # five viewers at once: one read
    assert reader.reads == 1
    now[0] += SAMPLE_SECONDS
    assert [s.ends[INGEST_PAYMENTS] for s in reader.sampled()] == [100, 200]
    for _ in range(100):
        now[0] += SAMPLE_SECONDS
        kept = reader.sampled()
    assert len(kept) == 60 and kept[-1].ends[INGEST_PAYMENTS] == 100 * reader.reads


@pytest.mark.parametrize("count", [0, 1, 3])
def test_the_chart_is_svg_that_fetches_nothing(count: int) -> None:
    samples = [Sample(5.0 * i, {INGEST_PAYMENTS: 10 * i}) for i in range(count)]
    svg = flow_chart(samples)
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "ingest (ingest.payments)" in svg
    assert 'href="http' not in svg and 'src="http' not in svg  # pygal's tooltip script is off: nothing to fetch


def test_the_chart_spaces_samples_by_time_not_evenly() -> None:
    samples = [Sample(at, {INGEST_PAYMENTS: int(at) * 10}) for at in (0.0, 5.0, 35.0)]
    assert flow_points(samples, INGEST_PAYMENTS) == [(-30.0, 10.0), (0.0, 10.0)]  # 30 s apart, not one step
    assert flow_points(samples, EVENTS_PAYMENTS) == [(-30.0, None), (0.0, None)]
    assert flow_points([], INGEST_PAYMENTS) == []
    uneven = [Sample(at, {INGEST_PAYMENTS: int(at) * 10}) for at in (0.0, 5.0, 10.0, 40.0)]
    cxs = sorted({float(x) for x in re.findall(r'<circle[^>]*cx="([0-9.]+)"', flow_chart(uneven))})
    assert len(cxs) == 3, cxs  # the three points of the one series with rates, at 35, 30 and 0 s ago
    first, second, last = cxs
    assert abs((second - first) / (last - first) - 5 / 35) < 0.02  # spaced by time: 5 s of 35, not half the width

"""The flow reader's sampling and rates (deploy/eos_view/flow.py) and the page's chart of them
(deploy/serve/page/charts.py), and the flow view answering from the samples taken in the background while Kafka
hangs (no stack: a reader whose reads wait on the test). The reader against a real cluster is in
test_page_browser.py (the flow view)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from deploy.eos_view.flow import SAMPLE_SECONDS, FlowReader, Sample, rates
from deploy.serve.page.charts import flow_chart, flow_points
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import EVENTS_PAYMENTS, INGEST_PAYMENTS
from tests.deploy.test_page import logged_in
from tests.deploy.test_page_health import ENV, served


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


class GatedReader(FlowReader):
    """The reader with the cluster replaced by a gate: a read waits until the test opens it (a Kafka that hangs),
    then answers 100 more records in ingest each time; it notes the thread each read ran on."""

    gate: ClassVar[threading.Event] = threading.Event()
    threads: ClassVar[list[str]] = []
    reads: ClassVar[int] = 0

    def _read(self) -> dict[str, int | None]:
        GatedReader.threads.append(threading.current_thread().name)
        assert GatedReader.gate.wait(60), "the test never opened the gate"
        GatedReader.reads += 1
        return {INGEST_PAYMENTS: 100 * GatedReader.reads}


def test_the_flow_view_answers_from_its_samples_while_kafka_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("deploy.serve.page.environment_readers.FlowReader", GatedReader)
    monkeypatch.setattr("deploy.eos_view.flow.SAMPLE_SECONDS", 0.0)  # every view asks for a new sample
    GatedReader.gate.clear()
    GatedReader.threads.clear()
    for url in served(tmp_path, "127.0.0.1:9"):
        session, _ = logged_in(url)
        view = f"{url}/ui/env/{ENV}/flow"
        # Kafka hangs before the first sample: the view answers (a read on the request thread would never return).
        first = session.get(view, timeout=30)
        assert first.status_code == 200 and 'id="flow-reading"' in first.text, first.text[-1000:]
        assert session.get(f"{view}.svg", timeout=30).status_code == 200
        GatedReader.gate.set()
        deadline = time.monotonic() + 30
        while 'data-stage="ingest"' not in (page := session.get(view, timeout=30).text):
            assert time.monotonic() < deadline, page[-1000:]
        ends = re.findall(r'data-stage="ingest"><td>ingest</td><td>[^<]*</td>\s*<td class="end">(\d+)', page)
        assert ends and int(ends[0]) >= 100, page
        # Kafka hangs again: each view still answers, with the samples already taken, marked stale.
        GatedReader.gate.clear()
        reads = GatedReader.reads
        for _ in range(3):
            page = session.get(view, timeout=30).text
            assert 'data-stage="ingest"' in page and 'id="flow-stale"' in page, page[-1000:]
        assert GatedReader.reads == reads  # none of those views got a new sample: they answered from the last
        GatedReader.gate.set()
    assert GatedReader.threads and set(GatedReader.threads) == {f"flow-samples-{ENV}"}  # never a request's thread

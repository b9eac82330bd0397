"""The pipeline's stage → topic map, written once in ikkai.contract.topics and read by the page and the demo."""

from __future__ import annotations

from demo.facts import LIVE_TOPICS
from demo.report import STAGES as REPORT_STAGES
from deploy.eos_view.flow import DEAD_LETTERS, STAGES, TOPICS
from ikkai.contract import topics


def test_every_pipeline_topic_belongs_to_one_stage_and_the_data_flows_from_ingest_to_receipts() -> None:
    assert len(set(topics.PIPELINE_TOPICS)) == len(topics.PIPELINE_TOPICS)
    assert topics.PIPELINE_TOPICS[0] == topics.INGEST_PAYMENTS
    assert [stage.name for stage in topics.PIPELINE] == ["ingested", "enriched", "decided", "delivered"]
    assert all(t.startswith(topics.DLQ_PREFIX) for stage in topics.PIPELINE for t in stage.dead_letters)


def test_the_page_and_the_demo_read_the_same_topics_from_the_one_map() -> None:
    assert set(TOPICS) == set(topics.PIPELINE_TOPICS) == set(LIVE_TOPICS)
    assert [topic for _, topic in STAGES] + list(DEAD_LETTERS) == list(TOPICS)
    assert [t for _, stage_topics in REPORT_STAGES for t in stage_topics] == list(LIVE_TOPICS)

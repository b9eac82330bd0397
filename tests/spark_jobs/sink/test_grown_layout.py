"""What a query's own markers forbid at its start, judged before it claims: pure, no stack."""

from __future__ import annotations

import dataclasses

import pytest

from ikkai.contract.kafka import KafkaContext
from ikkai.contract.markers import CommitMarker, CommitMarkerError
from ikkai.contract.owner_claims import OwnerClaimError
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.grown_layout import refuse_by_own_markers

OUTPUTS = ("decisions.x", "dlq.x")


def config(**changes: object) -> SinkConfig:
    base = SinkConfig(
        app="ikkai", query="infer", cluster=KafkaContext("b:9092"), output_topics=OUTPUTS, partitions=2,
        order_by=("input_partition", "input_offset"), source_topic="events.x", source_topic_id="ID-now",
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def marker(partition: int, **changes: object) -> CommitMarker:
    own = CommitMarker("ikkai", "infer", partition, 4, 2, 10, "events.x", {partition: 11}, "ID-now", OUTPUTS)
    return dataclasses.replace(own, **changes)  # type: ignore[arg-type]


def test_markers_of_this_layout_input_and_outputs_forbid_nothing() -> None:
    refuse_by_own_markers(config(), {0: marker(0), 1: marker(1)})
    refuse_by_own_markers(config(), {})  # a first start
    refuse_by_own_markers(config(), {0: marker(0, output_topics=())})  # a marker from before output topics were kept


def test_a_query_that_handed_over_is_refused_with_the_query_that_goes_on() -> None:
    with pytest.raises(OwnerClaimError) as refused:
        refuse_by_own_markers(config(), {0: marker(0), 1: marker(1, handed_over_to="infer-p4")})
    text = str(refused.value)
    assert text.startswith("_ikkai.commits.ikkai.infer: query infer handed its output over to query infer-p4")
    assert "run query infer-p4 (--query infer-p4)" in text and "\n" not in text


def test_other_output_topics_than_the_markers_name_are_refused() -> None:
    with pytest.raises(OwnerClaimError, match=r"committed output to decisions\.x, dlq\.x, now it writes decisions\.y"):
        refuse_by_own_markers(config(output_topics=("decisions.y", "dlq.x")), {0: marker(0)})


def test_a_marker_of_another_input_is_refused_before_its_handover_or_topics() -> None:
    """A recreated input (another topic id) is named first, with its fix, whatever else the marker says."""
    recreated = marker(0, source_topic_id="ID-old", handed_over_to="infer-p4", output_topics=("decisions.old",))
    with pytest.raises(CommitMarkerError, match="was deleted and recreated") as refused:
        refuse_by_own_markers(config(), {0: recreated})
    assert "--input-recreated ID-now" in str(refused.value)

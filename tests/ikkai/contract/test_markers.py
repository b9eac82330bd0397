"""The commit marker records in the contract: their encoding, their names, and how a topic name maps back."""

from __future__ import annotations

import pytest

from ikkai.contract.codec import default_codec
from ikkai.contract.markers import (
    COMMITS_TOPIC_PREFIX,
    CommitMarker,
    VersionCut,
    app_and_query,
    commits_topic_for,
    marker_key,
)
from ikkai.errors import ConfigError


def test_a_marker_with_offsets_and_cuts_round_trips_through_the_shipped_schema() -> None:
    marker = CommitMarker(
        app="ikkai", query="infer", partition=2, batch_id=41, partitions=4, records=17, source_topic="events.payments",
        source_offsets={1: 30, 0: 12}, output_topics=("decisions.fraud",), writer_version="m-2",
        cuts=(VersionCut("m-2", 40, {0: 10, 1: 25}),), handed_over_to="infer.v2",
    )  # fmt: skip
    decoded = CommitMarker.decode(marker.encode(default_codec()), default_codec())
    assert decoded == marker
    assert decoded.key == b"ikkai.infer.2"


@pytest.mark.parametrize("query", ["infer", "infer.v2", "a-b_c.d"])
def test_a_commits_topic_name_maps_back_to_its_app_and_query(query: str) -> None:
    assert app_and_query(commits_topic_for("ikkai", query)) == ("ikkai", query)


@pytest.mark.parametrize("topic", ["events.payments", "_ikkai.commits.", "_ikkai.commits.app", "_ikkai.other.a.b"])
def test_other_topics_are_no_commits_topics(topic: str) -> None:
    assert app_and_query(topic) is None


def test_names_that_would_make_writer_identities_ambiguous_are_refused() -> None:
    with pytest.raises(ConfigError):
        marker_key("a.b", "c", 0)  # would be a.b.c.0, like app a, query b.c
    with pytest.raises(ConfigError):
        commits_topic_for("a", ".hidden")
    assert commits_topic_for("a", "b.c").startswith(COMMITS_TOPIC_PREFIX)

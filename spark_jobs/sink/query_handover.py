"""A handover: a new query continues another query's output (``--after-query``), and where a new query starts.

Who may write an output topic is decided by the claim log (``claim_log``, ``ikkai.contract.owner_claims``):
a handover is a claim that moves the origin's output topics to this query, decided before anything
else happens. Then ``hand_over`` makes the origin's markers final and the origin unable to write
again, the Kafka way: for each partition p of the origin's commits topic it initialises a producer
with the origin's own ``transactional.id`` ``<app>.<Q>.<p>`` (which fences every producer of Q and
ends the transaction Q left open), reads Q's marker of p, now final, and writes it again with
``handed_over_to`` = this query, in a transaction of that id. A writer of Q that comes back (Q still
running, restarted, or a zombie) must re-initialise, reads that marker and refuses; a new start of Q
is refused by the claim log already. This query's writers then start, per output partition without
a marker of their own, at Q's committed offsets (``grown_layout.start_of``) and
record ``started_after`` = Q. It is idempotent: a start after a crash between the claim and the end
of the fencing does it again, and a partition already marked for this query is left as it is.

Across a grown layout (the origin's markers have another partition count) the new query starts where
every old output partition committed and leaves out each record the origin committed (``grown_layout``):
no offsets need be given.

``--start-offsets`` gives explicit input offsets instead: the operator's word that nothing below them
may be written (for output topics no query owns, e.g. written by a retired pipeline). Both are
recorded by the claim that makes the query owner, so a restart without them starts the same way.
"""

from __future__ import annotations

import dataclasses

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import CommitMarker, CommitMarkerError, commits_topic_for, read_markers
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.fenced_marker import rewrite_marker
from spark_jobs.sink.grown_layout import check_markers, on_accepted_recreation, origin_layout


def hand_over(config: SinkConfig) -> None:
    """Fence ``config.after_query``'s writers and record, on each of its partitions, that this query continues.

    Call it once the claim log made this query the owner. An origin without a commits topic never
    wrote (a query creates it before it claims): there is nothing to fence.
    """
    topic = commits_topic_for(config.app, config.after_query)
    metadata = AdminClient(config.cluster.client_config()).list_topics(topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return
    layout = dataclasses.replace(config, partitions=len(metadata.partitions))  # the origin's own count (grown_layout)
    for partition in sorted(metadata.partitions):
        _hand_over_partition(config, topic, partition, layout)


def take_over(config: SinkConfig, fence: bool) -> tuple[SinkConfig, dict[int, CommitMarker]]:
    """A handover's origin markers, final, and ``config`` with what an origin of another partition count committed.

    The origin's writers are fenced first (``hand_over``) while ``fence``; then its markers are read once for the
    whole start (``record_start`` takes them too), at every start after the handover (final then). Across a grown
    layout they give ``config.origin_layout`` (``grown_layout``). Without ``config.after_query``: as it is, none.
    """
    if not config.after_query:
        return config, {}
    if fence:
        hand_over(config)
    markers = read_markers(config.cluster, config.app, config.after_query,
                           topic=commits_topic_for(config.app, config.after_query))  # fmt: skip
    by_input_partition = config.partition_column is not None or config.outputs_follow_input
    layout = origin_layout(markers, config.partitions, by_input_partition)
    return dataclasses.replace(config, origin_layout=layout), markers


def _hand_over_partition(config: SinkConfig, topic: str, partition: int, layout: SinkConfig) -> None:
    """``layout``: the config with the origin's partition count, which its markers must have."""
    origin = config.after_query

    def hand_over_marker(marker: CommitMarker | None) -> CommitMarker | None:
        # Read after the origin's writers of this partition are fenced and its open transaction ended: final. A writer
        # of the origin must initialise again, which reads the marker written here.
        if marker is not None and not config.start_offsets and not on_accepted_recreation(config, marker):
            check_markers(layout, {partition: marker})  # its layout, its input: a grown layout is read as the old one
        if marker is not None and marker.handed_over_to == config.query:
            return None
        if marker is not None and marker.handed_over_to:
            raise CommitMarkerError(
                topic, f"query {origin} handed over to query {marker.handed_over_to} already",
                fix=f"continue query {marker.handed_over_to}, or hand over from it "
                f"(--after-query {marker.handed_over_to})",
            )  # fmt: skip
        if marker is None:
            marker = CommitMarker(config.app, origin, partition, -1, layout.partitions, 0, config.source_topic)
        return dataclasses.replace(marker, handed_over_to=config.query)

    try:
        rewrite_marker(config, origin, partition, topic, hand_over_marker)
    except KafkaException as exc:
        raise CommitMarkerError(
            topic, f"partition {partition}: the handover to {config.query} failed: {exc.args[0]}",
            fix=f"stop query {origin} and start this job again (the handover is done again, once)",
        ) from exc  # fmt: skip


def parse_start_offsets(text: str) -> dict[int, int]:
    """``--start-offsets``: ``0:120,1:80`` (input partition:first offset to write), every partition named once."""
    offsets: dict[int, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        partition, _, offset = item.partition(":")
        if not (partition.isdigit() and offset.isdigit()) or int(partition) in offsets:
            raise ConfigError(
                "the job's options", "--start-offsets", f"{item!r} in {text!r} is not a new <partition>:<offset>",
                fix="name each input partition once with the first offset to write, e.g. 0:120,1:80",
            )  # fmt: skip
        offsets[int(partition)] = int(offset)
    return offsets

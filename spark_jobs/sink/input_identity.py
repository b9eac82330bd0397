"""Which input a query's offsets are offsets of: the input topic's id, and starting over on a recreated topic.

A commit marker's source offsets mean something only on the topic they were read from. A topic
deleted and recreated under the same name starts again at offset 0, so the old markers would
leave out the new topic's records up to the old offsets as "committed before": records lost
without a word. Kafka gives every topic an id (KIP-516) that a recreated topic does not share.
The job looks the id up at start (``input_topic_id``, in ``query_start.prepare_sink``; a broker that
answers with no id, the zero id, is refused: it would compare equal before and after a recreation),
every marker records it
(``SinkConfig.source_topic_id``), and a marker of another id stops the job in one line
(``grown_layout.check_markers``) with the fix below.

Starting over on the recreated topic is an explicit act: ``--input-recreated <new topic id>``
(the id the refusal names) with a fresh ``--checkpoint``. Before the query starts, each output
partition's writer identity fences every older writer and commits a copy of its marker that
names the new id and no source offsets (``rebase_on_recreated_input``): from then on the
committed offsets of the new topic start at 0, and every record of the new topic is decided
once. Naming the id, not a bare flag, keeps the act to the one recreation the operator looked
at: left on the command line, it changes nothing once the markers name that id, and a later
recreation (another id) is refused again.

Why a fresh checkpoint: Spark's Kafka source does not know topic ids. From an old checkpoint it
starts at the old topic's offsets; where the new topic is shorter it reports data loss and, with
``failOnDataLoss=true`` (the jobs' setting), stops the query; where it is as long or longer it
silently starts in the middle, and the new topic's first records would never be read.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import CommitMarker, read_markers
from spark_jobs.sink.config import OPERATOR_GUIDE, SinkConfig
from spark_jobs.sink.fenced_marker import rewrite_marker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RECREATION_GUIDE = f"{OPERATOR_GUIDE}: topic recreation"
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid(0, 0) as Kafka prints it: what a broker without topic ids answers


def input_topic_id(job: str, cluster: KafkaContext, topic: str, deadline_s: float = 60.0) -> str:
    """Kafka's id of ``topic`` (KIP-516, base64 as Kafka's tools print it), asked until ``deadline_s``.

    A topic created a moment ago may be unknown to the broker that answers: asked again until the
    deadline; any other error stops the job here.
    """
    admin = AdminClient(cluster.client_config())
    give_up_at = time.monotonic() + deadline_s
    while True:
        future = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic]
        try:
            topic_id = str(future.result(timeout=30).topic_id)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT) and not error.retriable():
                raise ConfigError(
                    job, topic, f"its topic id cannot be read ({error.name()}: {error.str()})",
                    fix="check that the input topic exists and that this client may Describe it",
                ) from exc  # fmt: skip
            if time.monotonic() > give_up_at:
                raise ConfigError(
                    job, topic, f"the input topic does not exist (asked for {deadline_s:.0f}s)",
                    fix="create it (topics are never auto-created) or pass the right --input",
                ) from exc  # fmt: skip
            time.sleep(0.5)
            continue
        if topic_id in ("", ZERO_TOPIC_ID, "None"):
            raise ConfigError(
                job, topic, f"the broker gave no topic id ({topic_id or 'empty'}): a recreated topic would compare "
                "equal to the one it replaced, and its first records would be left out as committed before",
                fix="run the job against brokers that give topic ids (Kafka 2.8 or newer; KRaft always does); ask the "
                "cluster's operators if a proxy in between drops them",
            )  # fmt: skip
        return topic_id


def checkpoint_is_fresh(checkpoint: Path | str, spark: SparkSession | None = None) -> bool:
    """True unless a Spark checkpoint at ``checkpoint`` has planned a batch (its ``offsets`` log has an entry).

    A folder of this machine is read directly; a URI (``hdfs://``, ``s3a://``) through the session's
    Hadoop file system, the one Spark writes the checkpoint with.
    """
    if isinstance(checkpoint, str) and is_uri(checkpoint):
        if spark is None:
            raise ValueError(f"{checkpoint}: a checkpoint URI is read through a SparkSession")
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        offsets = jvm.org.apache.hadoop.fs.Path(checkpoint.rstrip("/") + "/offsets")
        fs = offsets.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        return not fs.exists(offsets) or not any(str(s.getPath().getName()).isdigit() for s in fs.listStatus(offsets))
    offsets = Path(checkpoint) / "offsets"
    return not offsets.is_dir() or not any(p.name.isdigit() for p in offsets.iterdir())


def is_uri(location: str) -> bool:
    """``hdfs://nn/x``, ``s3a://bucket/x``, ``file:///x``: a location with a scheme, which a ``Path`` would mangle."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", location) is not None


def _of_another_topic(config: SinkConfig, marker: CommitMarker | None) -> bool:
    return marker is not None and marker.source_topic_id not in ("", config.source_topic_id)


def rebase_on_recreated_input(
    config: SinkConfig, checkpoint: Path | str, spark: SparkSession | None = None
) -> list[int]:
    """``--input-recreated``: markers of another topic id start over at offset 0 of this one; the partitions rebased.

    Refuses an id that is not the input's, and a used checkpoint while a marker still needs the
    rebase (module docstring). Without ``config.input_recreated`` it does nothing: a marker of
    another id is then refused by ``check_markers`` where the markers are read.
    """
    if not config.input_recreated:
        return []
    refuse_another_id(config)  # before anything is read
    markers = read_markers(config.cluster, config.app, config.query, topic=config.commits_topic)
    return sorted(start_over(config, markers, checkpoint, spark)[1])


def refuse_another_id(config: SinkConfig) -> None:
    """``--input-recreated`` must name the input's id as the start looked it up."""
    if config.input_recreated != config.source_topic_id:
        raise ConfigError(
            config.query, "--input-recreated", f"names topic id {config.input_recreated}, but "
            f"{config.source_topic} has id {config.source_topic_id}",
            fix="pass the id the refusal named, once you have checked that the topic holding it is the input to "
            f"start over on ({RECREATION_GUIDE})",
        )  # fmt: skip


def start_over(
    config: SinkConfig, markers: Mapping[int, CommitMarker], checkpoint: Path | str, spark: SparkSession | None = None
) -> tuple[dict[int, CommitMarker], list[int]]:
    """``rebase_on_recreated_input`` over the query's ``markers`` as the start read them: the markers as they are after
    it (each partition it fenced with its marker read then, or the one it wrote), and the partitions it rebased."""
    if not config.input_recreated:
        return dict(markers), []
    refuse_another_id(config)
    stale = sorted(p for p, marker in markers.items() if _of_another_topic(config, marker))
    if stale and not checkpoint_is_fresh(checkpoint, spark):
        raise ConfigError(
            config.query, "--input-recreated", f"the checkpoint {checkpoint} holds offsets of the old topic: Spark "
            "would start the new one in the middle, or stop with data loss",
            fix=f"start over with a fresh --checkpoint ({RECREATION_GUIDE})",
        )  # fmt: skip
    after, rebased_partitions = dict(markers), []
    for partition in stale:
        now, wrote = _rebase(config, partition)
        if now is None:
            after.pop(partition)
        else:
            after[partition] = now
        if wrote:
            rebased_partitions.append(partition)
    return after, rebased_partitions


def _rebase(config: SinkConfig, partition: int) -> tuple[CommitMarker | None, bool]:
    """Fence partition ``partition``'s writers, then commit its marker anew: the new topic id, no source offsets.

    The partition's marker after it, and whether this start wrote it (else another instance rebased it in between).
    """

    def rebase(marker: CommitMarker | None) -> CommitMarker | None:  # read after the fence
        if marker is None or not _of_another_topic(config, marker):
            return None  # another instance rebased it in between
        return rebased(marker, config.source_topic_id)

    return rewrite_marker(config, config.query, partition, config.commits_topic, rebase)


def rebased(marker: CommitMarker, topic_id: str) -> CommitMarker:
    """``marker`` started over on the recreated topic ``topic_id``: no source offsets, and no version or cuts. Pure.

    The old topic's cuts name its offsets; kept, they would tell a replay of the new topic that its first
    offsets were decided by the versions that decided the old topic's. Without them, the first write on
    the new topic records its version as a cut from offset 0.
    """
    return dataclasses.replace(
        marker, source_topic_id=topic_id, source_offsets={}, records=0, writer_version="", cuts=()
    )

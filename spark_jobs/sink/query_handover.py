"""Who writes a query's output topics: a second query over them is refused, or takes over explicitly.

Every commit marker names the topics its query writes (``output_topics``). At start, before the
query runs, ``check_output_owners`` reads the newest marker of every query on the cluster (every
``_ikkai.commits.<app>.<query>`` topic) and refuses, in one line naming the other query and the
fix, when this query has committed nothing yet and another query that reads the same input has
markers naming one of its output topics: starting from the beginning would decide every event a
second time, under new decision ids and so new Idempotency-Keys. (A query of another input writes
other events: enrich's CDC query beside the API's.) It goes on only when told where to start:

- ``after_query`` (``--after-query Q``): a handover. ``hand_over`` makes Q's markers final and
  Q unable to write again, the Kafka way: for each output partition p it initialises a producer
  with Q's own ``transactional.id`` ``<app>.<Q>.<p>`` (which fences every producer of Q and ends
  the transaction Q left open), reads Q's marker of p, now final, and writes it again with
  ``handed_over_to`` = this query, in a transaction of that id. A writer of Q that comes back
  (Q still running, restarted, or a zombie) must re-initialise, reads that marker and refuses.
  This query's writers then start, per output partition, at Q's committed offsets
  (``partition_transactions._committed_offsets``) and record ``started_after`` = Q.
- ``start_offsets`` (``--start-offsets``): explicit input offsets, the operator's word that
  nothing below them may be written again (the other query's markers are gone or unusable, and it
  is stopped for good).

A query that already has markers of its own goes on from them. It is refused only if a query
that took over from it wrote since (running it again would decide that query's events twice)
or if it handed its output over. The handover chain is followed: a query that took over from one
that took over from a third accepts both. A shadow query (``--shadow``) writes topics of its own,
so it never counts as writing the live ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer

from ikkai.contract import kafka
from ikkai.contract.codec import default_codec
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import (
    CommitMarker,
    CommitMarkerError,
    commits_topic_for,
    commits_topics,
    marker_key,
    read_all_markers,
    read_marker,
)
from spark_jobs.sink.kafka_errors import call_with_retries
from spark_jobs.sink.partition_transactions import SinkConfig, check_markers

Markers = Mapping[tuple[str, str], list[CommitMarker]]  # (app, query) -> its newest marker per partition


def check_output_owners(config: SinkConfig) -> SinkConfig:
    """Refuse a query over another query's output unless told where to start; hand over when told to.

    Returns the config the writers run with: a query that took over once names its origin from then
    on (``after_query``: from its markers, or from the origin's, which say whom they handed over to),
    so an output partition that has no marker of its own yet still starts at the origin's offsets
    after a restart without ``--after-query``.
    """
    topics = commits_topics(config.cluster)
    markers = {topics[topic]: found for topic, found in read_all_markers(config.cluster, list(topics)).items()}
    refusal = owners_refusal(config, markers)
    if refusal is not None:
        raise refusal
    own = markers.get((config.app, config.query), [])
    if config.after_query and not own:
        hand_over(config)
    origin = _origin(config, markers)
    if origin and not config.after_query and not config.start_offsets:
        return dataclasses.replace(config, after_query=origin)
    return config


def _origin(config: SinkConfig, markers: Markers) -> str:
    """The query this one took over from: named by ``--after-query``, in its own markers, or by the origin's."""
    own = markers.get((config.app, config.query), [])
    handed = (q for (app, q), theirs in sorted(markers.items()) if app == config.app
              for m in theirs if m.handed_over_to == config.query)  # fmt: skip
    return config.after_query or next((m.started_after for m in own if m.started_after), "") or next(handed, "")


def owners_refusal(config: SinkConfig, markers: Markers) -> CommitMarkerError | None:
    """Why this query must not start over these markers (every query's on the cluster), or None."""
    own = markers.get((config.app, config.query), [])
    where = config.commits_topic
    for marker in own:
        if marker.handed_over_to:
            return CommitMarkerError(
                where, f"query {config.query} handed its output over to query {marker.handed_over_to}",
                fix=f"run query {marker.handed_over_to} (--query {marker.handed_over_to}), which continues where "
                "this one stopped",
            )  # fmt: skip
        if marker.output_topics and set(marker.output_topics) != set(config.output_topics):
            return CommitMarkerError(
                where, f"query {config.query} committed output to {', '.join(marker.output_topics)}, now it writes "
                f"{', '.join(config.output_topics)}: its markers would leave those events out of the new topics",
                fix="keep this query's output topics; other topics are another query's (a candidate model: --shadow)",
            )  # fmt: skip
        if config.after_query and marker.started_after != config.after_query:
            return CommitMarkerError(
                where, f"query {config.query} has committed output already; --after-query {config.after_query} "
                "starts a query that has not",
                fix="drop --after-query: this query goes on from its own markers",
            )  # fmt: skip
    accepted = _predecessors(config, markers)
    ours = set(config.output_topics)
    for (app, query), theirs in sorted(markers.items()):
        # Another input's records are other events (enrich's CDC query writes events.payments beside the API's).
        same_input = [m for m in theirs if m.source_topic == config.source_topic]
        overlap = sorted(ours & {t for m in same_input for t in m.output_topics})
        if (app, query) == (config.app, config.query) or not overlap or (app == config.app and query in accepted):
            continue
        if app == config.app and any(m.started_after == config.query for m in theirs):
            return CommitMarkerError(
                where, f"query {query} took over {', '.join(overlap)} from query {config.query} and has written "
                "since: running this one again would decide those events twice",
                fix=f"run query {query} (--query {query}); to move back, stop it and start this one "
                f"with --after-query {query}",
            )  # fmt: skip
        if own or config.start_offsets:
            continue  # started with consent before, or told where to start: the operator's word
        query = _successor(app, query, markers)  # a query that handed over stopped for good: name who writes now
        return CommitMarkerError(
            where, f"query {query} (app {app}) has committed output to {', '.join(overlap)}: a new query "
            f"{config.query} over them would decide its events again",
            fix=f"continue that query (--query {query}: a new model or setting is a cutover there), hand over from "
            f"it (--after-query {query}), or write other topics (--shadow for a candidate model)",
        )  # fmt: skip
    return None


def _successor(app: str, query: str, markers: Markers) -> str:
    """The query that writes ``query``'s output now: ``query``, or the end of the handovers from it."""
    seen = {query}
    while nxt := next((m.handed_over_to for m in markers.get((app, query), []) if m.handed_over_to), ""):
        if nxt in seen:
            break
        seen.add(query := nxt)
    return query


def _predecessors(config: SinkConfig, markers: Markers) -> set[str]:
    """The queries this one took over from, directly or through the queries that took over from them."""
    found: set[str] = set()
    step = {_origin(config, markers)}
    while step - found - {""}:
        found |= step - {""}
        step = {m.started_after for q in found for m in markers.get((config.app, q), [])}
    return found


def hand_over(config: SinkConfig) -> None:
    """Fence ``config.after_query``'s writers and record, on each of its partitions, that this query continues."""
    topic = commits_topic_for(config.app, config.after_query)
    if not read_all_markers(config.cluster, [topic]).get(topic):
        raise CommitMarkerError(
            topic, f"query {config.after_query} has committed nothing: there is nothing to hand over from",
            fix="check the query name (--after-query), or start without it",
        )  # fmt: skip
    for partition in range(config.partitions):
        _hand_over_partition(config, topic, partition)


def _hand_over_partition(config: SinkConfig, topic: str, partition: int) -> None:
    origin, deadline = config.after_query, config.retry_deadline_s
    transactional_id = marker_key(config.app, origin, partition).decode()
    producer = Producer({
        **config.cluster.client_config(), **config.producer_config,
        "transactional.id": transactional_id, "transaction.timeout.ms": config.transaction_timeout_ms,
        **kafka.IDEMPOTENT_PRODUCER,
    })  # fmt: skip
    try:
        # Fences every producer of the origin on this partition and ends its open transaction: from here on
        # its marker is final, and a writer of it must initialise again, which reads the record written below.
        call_with_retries(
            transactional_id, "init_transactions", lambda: producer.init_transactions(deadline), deadline_s=deadline
        )
        marker = read_marker(config.cluster, config.app, origin, partition, topic=topic)
        if marker is not None and marker.handed_over_to == config.query:
            return
        if marker is not None and marker.handed_over_to:
            raise CommitMarkerError(
                topic, f"query {origin} handed over to query {marker.handed_over_to} already",
                fix=f"continue query {marker.handed_over_to}, or hand over from it "
                f"(--after-query {marker.handed_over_to})",
            )  # fmt: skip
        if marker is not None:
            check_markers(config, {partition: marker})  # the same layout and input, or its offsets mean nothing
        else:
            marker = CommitMarker(config.app, origin, partition, -1, config.partitions, 0, config.source_topic)
        record = dataclasses.replace(marker, handed_over_to=config.query)
        call_with_retries(transactional_id, "begin_transaction", producer.begin_transaction, deadline_s=deadline)
        producer.produce(topic, key=record.key, value=record.encode(default_codec()), partition=partition)
        call_with_retries(
            transactional_id, "commit_transaction", lambda: producer.commit_transaction(deadline), deadline_s=deadline
        )
    except KafkaException as exc:
        raise CommitMarkerError(
            topic, f"partition {partition}: the handover to {config.query} failed: {exc.args[0]}",
            fix=f"stop query {origin} and start this job again",
        ) from exc  # fmt: skip
    finally:
        producer.flush(5)


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


def handover_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The jobs' ``--after-query`` and ``--start-offsets`` options (click): where a new query starts."""
    import click

    def checked(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict[int, int]:
        try:
            return parse_start_offsets(value or "")
        except ConfigError as exc:
            raise click.BadParameter(f"{exc.problem} ({exc.fix})") from exc

    command = click.option(
        "--start-offsets", callback=checked, metavar="P:O,...",
        help="A new query over topics another query wrote: write only input records from these offsets on "
        "(when that query's markers are gone; it must be stopped for good).",
    )(command)  # fmt: skip
    return click.option(
        "--after-query", default="", metavar="QUERY",
        help="A new query continues QUERY's output: QUERY is fenced and stops for good, this one starts at its "
        "committed offsets.",
    )(command)  # fmt: skip

"""One Kafka transaction per (query, micro-batch N, partition p), by a producer kept between batches.

``write_partition`` is what writes Kafka partition p of batch N once every record of it is in hand, in
their final order: the executor's writer process (``executor_writer``, the default ``--transactional-writer
executor``) on a task's request, or the Spark task's own Python worker (``--transactional-writer worker``).

- Partition p of batch N is one transaction of a producer with the stable ``transactional.id``
  ``<app>.<query>.<p>``. A fresh producer's ``init_transactions()`` fences any older instance and
  ends its open transaction; then (query, p)'s marker is read from partition p of the query's
  commits topic (``commit_markers``: nobody else writes there, so nothing can hide it).
- The marker records *source offsets*: per input partition, the next input offset whose output
  for p is not committed yet. Every record names the input record it came from; records below
  the marker's offsets are already committed and are left out, the rest and the new marker (the
  offsets merged with this transaction's) are written and committed together. A partition with
  nothing left is skipped. Batch numbers decide nothing, so a lost, reset or restored Spark
  checkpoint, or other batch boundaries (``maxOffsetsPerTrigger`` changed), can neither
  duplicate nor drop output: a re-run writes exactly what is missing.
- The writer keeps that producer for the next batches in its ``ProducerPool`` (``producer_pool``: the
  executor writer's, or the Python worker's own) and knows the marker from its own commits, so a
  steady batch costs one transaction. A kept producer that another writer or instance fenced in
  between fails its transaction, which writes nothing; the write then starts anew with a fresh
  producer, which re-reads the marker.
- Every marker must have been written with the job's partition count and input topic; anything
  else stops the job, because a different layout would re-write committed records.

A test can hold a transaction open just before its commit (``commit_pause``); unset, that does nothing.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ikkai.contract.codec import default_codec
from ikkai.errors import IkkaiError
from spark_jobs.sink.commit_markers import CommitMarker, Lineage, commits_topic_for, read_marker
from spark_jobs.sink.commit_pause import pause_before_commit
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.fenced_marker import rewrite_marker
from spark_jobs.sink.grown_layout import OriginLayout, not_held, start_of
from spark_jobs.sink.grown_layout import check_markers as check_markers  # also every writer's, on the marker it reads
from spark_jobs.sink.kafka_errors import ErrorKind, TransactionError, call_with_retries, classify
from spark_jobs.sink.producer_pool import KeptProducer, ProducerPool, process_pool, produce
from spark_jobs.sink.record import KEY, SOURCE_OFFSET, SOURCE_PARTITION, TOPIC, VALUE, Origin, Record, origin
from spark_jobs.sink.size_bounds import read_topic_limits, record_sizes, set_aside_too_large, transaction_chunks


@dataclass(frozen=True)
class PartitionResult:
    partition: int
    batch_id: int
    records: int
    skipped: bool  # the marker said every record of this partition was already committed
    outside_key_partition: int = 0  # written in place to their input's partition, not their key's default one
    already_committed: int = 0  # records left out: the marker's source offsets say they are committed
    new_producer: bool = False  # this worker had no usable producer: init_transactions and a marker read first
    seconds: float = 0.0  # in the task, from asking for the producer to the commit


def _committed_offsets(config: SinkConfig, partition: int) -> tuple[dict[int, int], Lineage]:
    """(query, partition)'s committed source offsets and lineage; call it after ``init_transactions``.

    The marker is read here, and, for a partition without one after a handover of the same layout, the
    origin's (final: the handover fenced that query's writers and recorded itself there first);
    ``grown_layout.start_of`` says what they mean.
    """
    marker = read_marker(config.cluster, config.app, config.query, partition, topic=config.commits_topic)
    origin = None
    if marker is None and config.origin_layout is None and config.after_query and not config.start_offsets:
        origin_topic = commits_topic_for(config.app, config.after_query)
        origin = read_marker(config.cluster, config.app, config.after_query, partition, topic=origin_topic)
    return start_of(config, partition, marker, origin)


class RefusedAsTooLarge(Exception):
    """The broker (or the producer) refused output records of these input records as too large; nothing committed.

    ``error`` is the transaction's own failure, what the write raises when there is no DLQ topic to set them aside.
    """

    def __init__(self, origins: frozenset[Origin], error: TransactionError) -> None:
        super().__init__(f"{len(origins)} input records with an output refused as too large")
        self.origins = origins
        self.error = error


def write_partition(
    config: SinkConfig,
    batch_id: int,
    partition: int,
    records: Sequence[Record],
    pool: ProducerPool | None = None,
    sizes: Sequence[int] | None = None,
) -> PartitionResult:
    """(query, batch_id, partition)'s ``records``, in their final order, as one or more transactions.

    With the producers of ``pool``: the executor writer's own, or by default this process's (``process_pool``).
    ``sizes``: ``record_sizes(records)`` when the caller has them (the executor writer's, from Arrow).

    No size stops the write: a record too large for its topic is set aside as a dead letter first
    (``set_aside_too_large``), and a batch of more than ``max_transaction_bytes`` is written as
    several transactions, each with its own marker, cut only between input records
    (``transaction_chunks``). A crash between two of them leaves the first committed and marked:
    the re-run leaves those records out and writes the rest. A record the broker refuses as too
    large all the same (its topic's ``max.message.bytes`` lowered since it was read) aborts its
    transaction; the write re-reads the limits of the topics it writes and starts again: with new
    limits, what they say is too large is set aside; with the same, the refused input records are
    (the broker's word over ours). Each round reads new limits (``MAX_REFUSAL_ROUNDS`` times at
    most) or sets aside at least one more input record, else the refusal is final
    (``RefusedWithinLimits``): no record makes it loop.
    """
    if not records:  # nothing to vouch for: no producer, no transaction
        return PartitionResult(partition, batch_id, 0, skipped=False)
    refused: frozenset[Origin] = frozenset()
    results: list[PartitionResult] = []
    rounds = 0  # with new limits read
    if sizes is None:
        sizes = record_sizes(records)  # the one size pass: the limits and the cuts read the same sizes
    while True:
        earlier = sum(r.records for r in results)  # committed by earlier rounds: this one finds them committed
        first = len(results)
        try:
            kept = set_aside_too_large(config, records, refused, sizes)
            chunks = transaction_chunks(kept, config.max_transaction_bytes, sizes if kept is records else None)
            for chunk in chunks:
                results.append(_write_transaction(config, batch_id, partition, chunk, pool or process_pool()))
        except RefusedAsTooLarge as refusal:
            if not config.dlq_topic:  # nowhere to set them aside: the batch fails as the broker or producer said
                raise refusal.error from refusal
            topics = {*(r[TOPIC] for r in records), *([config.dlq_topic] if config.dlq_topic else [])}
            admin = AdminClient(config.cluster.client_config())
            limits = {**config.topic_max_message_bytes, **read_topic_limits(admin, topics, config.retry_deadline_s)}
            if limits != dict(config.topic_max_message_bytes) and rounds < MAX_REFUSAL_ROUNDS:
                rounds += 1
                config = dataclasses.replace(config, topic_max_message_bytes=limits)  # they decide what is too large
            elif refusal.origins <= refused:
                raise RefusedWithinLimits(config.transactional_id(partition), refusal.origins, limits) from None
            else:  # refused within the limits as read: those input records are set aside all the same
                refused |= refusal.origins
            sys.stderr.write(
                f"transactional.id {config.transactional_id(partition)}: {len(refusal.origins)} input records refused "
                f"as too large; max.message.bytes read again ({limits}), writing them as dead letters\n"
            )
            continue
        result = combined_result(partition, batch_id, results[first:])
        return dataclasses.replace(
            result, records=result.records + earlier, already_committed=max(result.already_committed - earlier, 0),
            new_producer=any(r.new_producer for r in results), seconds=sum(r.seconds for r in results),
        )  # fmt: skip


def combined_result(partition: int, batch_id: int, results: Sequence[PartitionResult]) -> PartitionResult:
    """What a partition's transactions did, together."""
    return PartitionResult(
        partition, batch_id, sum(r.records for r in results), skipped=all(r.skipped for r in results),
        already_committed=sum(r.already_committed for r in results),
        new_producer=any(r.new_producer for r in results), seconds=sum(r.seconds for r in results),
    )  # fmt: skip


MAX_REFUSAL_ROUNDS = 8  # rounds of one write_partition that read new limits: limits that keep changing end it


class RefusedWithinLimits(IkkaiError):
    """The brokers refuse records as too large although they are within the max.message.bytes read for their topics."""

    def __init__(self, transactional_id: str, origins: frozenset[Origin], limits: Mapping[str, int]) -> None:
        shown = ", ".join(f"{p}/{o}" for p, o in sorted(origins)[:5])
        super().__init__(
            f"transactional.id {transactional_id}: the brokers refuse the dead letters of input records {shown} as "
            f"too large, within the max.message.bytes read for their topics ({dict(limits)})",
            fix="a compressed batch larger than its records, or a broker limit below the topic's: set no "
            "compression.type for the sink's producer, or raise the topic's max.message.bytes (kafka-configs.sh "
            "--alter --entity-type topics --entity-name <topic> --add-config max.message.bytes=<bytes>); the job "
            "goes on where it stopped",
        )
        self.transactional_id, self.origins = transactional_id, origins


def _write_transaction(
    config: SinkConfig, batch_id: int, partition: int, records: Sequence[Record], pool: ProducerPool
) -> PartitionResult:
    """One transaction for (query, batch_id, partition).

    The pool's producer for this transactional.id is reused when it has one. If that one turns
    out fenced (another writer or instance initialised the same id since its last commit), the
    write is done again from the start with a fresh producer, which re-reads the marker.
    """
    started = time.monotonic()
    txn_id = config.transactional_id(partition)
    key = (config.cluster.bootstrap_servers, txn_id)
    writer = pool.get(config, txn_id)
    if writer is not None:
        try:
            result = _write(config, writer, batch_id, partition, records)
            return dataclasses.replace(result, seconds=time.monotonic() - started)
        except TransactionError as exc:
            pool.evict(key)
            if exc.kind is not ErrorKind.FATAL:
                raise
            sys.stderr.write(f"transactional.id {txn_id}: producer was fenced since its last commit, starting anew\n")
        except BaseException:
            pool.evict(key)
            raise
    try:
        result = _write(config, _fresh(pool, config, partition), batch_id, partition, records)
        return dataclasses.replace(result, new_producer=True, seconds=time.monotonic() - started)
    except BaseException:
        pool.evict(key)  # FATAL: the producer is dropped, never reused
        raise


def _fresh(pool: ProducerPool, config: SinkConfig, partition: int) -> KeptProducer:
    """A fresh producer of ``partition``'s id (``init_transactions`` fences every older one); the marker says where
    it is."""
    writer = pool.fresh(config, config.transactional_id(partition))
    writer.committed[config.commits_topic], writer.lineage[config.commits_topic] = _committed_offsets(config, partition)
    return writer


def uncommitted(
    records: Sequence[Record], committed: Mapping[int, int], origin: OriginLayout | None = None
) -> tuple[list[Record], dict[int, int]]:
    """The records to write, and the source offsets once they are committed too.

    To write: at or beyond the committed source offsets, and not committed by the ``origin`` of another
    layout (``grown_layout``). The offsets cover the origin's records too: they are in the output.
    """
    pending = [r for r in records if r[SOURCE_OFFSET] >= committed.get(r[SOURCE_PARTITION], 0)]
    covered = dict(committed)
    for _, _, _, _, _, source_partition, source_offset in pending:
        covered[source_partition] = max(covered.get(source_partition, 0), source_offset + 1)
    return not_held(pending, origin), covered


def record_start(config: SinkConfig, partition: int, origin: Mapping[int, CommitMarker]) -> bool:
    """Write ``partition``'s start as a marker of its own (no record) unless it has one; whether it wrote one.

    A query that starts after another (``--after-query``, across a grown layout or not) or at
    ``--start-offsets`` computes each output partition's start (``grown_layout.start_of``; ``origin``: the origin's
    markers, read once by the start after its handover); a partition that then gets no record keeps no
    marker, and a query that later takes over from this one would start it at offset 0 and write again
    what was committed before. Called at the start, before any batch: ``init_transactions`` first (fencing
    any earlier writer of the id), then the marker is read.
    """

    def start(own: CommitMarker | None) -> CommitMarker | None:  # read after the fence
        committed, lineage = start_of(config, partition, own, origin.get(partition))
        if own is not None or not any(committed.values()):
            return None
        return _marker(
            config, partition, -1, 0, dict(committed), lineage.written_by(config.writer_version, -1, committed)
        )

    return rewrite_marker(config, config.query, partition, config.commits_topic, start)[1]


def _write(
    config: SinkConfig,
    writer: KeptProducer,
    batch_id: int,
    partition: int,
    records: Sequence[Record],
) -> PartitionResult:
    committed = writer.committed.get(config.commits_topic)
    if committed is None:  # this producer has not read this commits topic yet (another query's writer)
        committed, writer.lineage[config.commits_topic] = _committed_offsets(config, partition)
        writer.committed[config.commits_topic] = committed
    pending, covered = uncommitted(records, committed, config.origin_layout)
    if not pending and covered == committed:
        return PartitionResult(partition, batch_id, 0, skipped=True, already_committed=len(records))
    # Records past the marker that the origin of another layout holds, all of them: nothing to write, but the marker
    # moves past them in a transaction of its own, else a query that takes over from this one (same layout, so no
    # origin to filter by) would start below them and write them again. The start alone: ``record_start``.
    return _transact(config, writer, batch_id, partition, pending, committed, covered, len(records))


def _transact(
    config: SinkConfig,
    writer: KeptProducer,
    batch_id: int,
    partition: int,
    pending: Sequence[Record],
    committed: Mapping[int, int],
    covered: dict[int, int],
    given: int,
) -> PartitionResult:
    """One transaction of ``writer``: ``pending`` and the marker at ``covered``; ``given``: the records asked for."""
    # A new writer_version takes over from the offsets committed so far: older decisions keep theirs.
    lineage = writer.lineage.get(config.commits_topic, Lineage()).written_by(config.writer_version, batch_id, committed)
    producer, txn_id, deadline = writer.producer, config.transactional_id(partition), config.retry_deadline_s
    writer.refused.clear()
    call_with_retries(txn_id, "begin_transaction", producer.begin_transaction, deadline_s=deadline)
    try:
        try:
            for record in pending:
                topic, key, value, timestamp, headers, source_partition, source_offset = record
                try:
                    produce(producer, topic, key, value, partition, timestamp, headers)
                except KafkaException as exc:  # over the producer's own message.max.bytes: set aside, write again
                    if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                        raise
                    writer.refused.append((topic, key, len(value or b"")))
                    _abort(producer, txn_id, deadline)
                    error = exc.args[0]
                    failure = TransactionError(txn_id, "produce", error, classify(error), fix=_PRODUCE_FIX)
                    raise RefusedAsTooLarge(frozenset({(source_partition, source_offset)}), failure) from exc
            marker = _marker(config, partition, batch_id, len(pending), covered, lineage)
            produce(producer, config.commits_topic, marker.key, marker.encode(default_codec()), partition, None)
        except KafkaException as exc:  # produce() itself refused: fatal (fenced) or the transaction must abort
            error = exc.args[0]
            kind = classify(error)
            raise TransactionError(txn_id, "produce", error, kind, fix=_PRODUCE_FIX) from exc
        with pause_before_commit(producer, config.query, partition, batch_id):
            call_with_retries(
                txn_id, "commit_transaction", lambda: producer.commit_transaction(deadline), deadline_s=deadline
            )
    except TransactionError as exc:
        if exc.kind is ErrorKind.ABORT:
            _abort(producer, txn_id, deadline)
            producer.poll(0)  # delivery reports not served yet: a record refused as too large among them
        origins = _origins(writer.refused, pending)
        if origins:  # the broker refused records as too large: written again with them set aside (write_partition)
            raise RefusedAsTooLarge(origins, exc) from exc
        raise
    writer.committed[config.commits_topic] = covered
    writer.lineage[config.commits_topic] = lineage
    left_out = given - len(pending)
    return PartitionResult(partition, batch_id, len(pending), skipped=False, already_committed=left_out)


def _marker(
    config: SinkConfig, partition: int, batch_id: int, records: int, covered: Mapping[int, int], lineage: Lineage
) -> CommitMarker:
    """(query, partition)'s marker once ``records`` more records are committed, covering ``covered``. Pure."""
    marker = CommitMarker(
        config.app, config.query, partition, batch_id, config.partitions, records,
        config.source_topic, covered, output_topics=config.output_topics, writer_version=lineage.version,
        cuts=lineage.cuts, started_after=lineage.started_after,
    )  # fmt: skip
    return dataclasses.replace(marker, source_topic_id=config.source_topic_id)  # which input, by id


_PRODUCE_FIX = "the transaction was not committed; Spark retries the attempt, a fenced producer is discarded"


def _abort(producer: Producer, txn_id: str, deadline: float) -> None:
    call_with_retries(txn_id, "abort_transaction", lambda: producer.abort_transaction(deadline), deadline_s=deadline)


def _origins(refused: Sequence[tuple[str, bytes | None, int]], records: Sequence[Record]) -> frozenset[Origin]:
    """The input records of ``records`` whose output matches a refused record (topic, key, value size)."""
    if not refused:
        return frozenset()
    marks = set(refused)
    return frozenset(origin(r) for r in records if (r[TOPIC], r[KEY], len(r[VALUE] or b"")) in marks)

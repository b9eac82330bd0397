"""Master data as of the event: a bitemporal, replay-deterministic join of events with profile versions.

For each event and each master-data topic (merchants, customers) the join picks the profile
version of the event's merchant/customer with

    valid_from  <= event_time     (business time: the version in force when the payment happened)
    published_at <= ingested_at   (system time: the version existed when the event was ingested)

and among those the newest ``valid_from``, then the latest ``published_at``, then the highest
offset (a correction of a version wins over it, but only for events ingested after the
correction). ``published_at`` is the profile record's Kafka timestamp, which the master-data
topics set to the broker's append time (``LogAppendTime``, see ``master_data``); ``ingested_at``
is the ingest record's Kafka timestamp (its producer's clock unless the ingest topic, too, uses
``LogAppendTime``: set that where producer clocks may drift). Both are stored in Kafka, so a replay a year later, after
any number of newer versions were published, joins exactly what the first run joined: a version
published after the event was ingested is invisible to that event, whatever its valid_from.

No version → documented defaults, not a rejection: ``merchant_risk_tier``/``customer_segment``
"unknown", countries empty, ``*_profile_as_of`` null. Holding such an event would not help: a
version published later can never apply to it (that is the point of the system-time cut-off).

A master-data *outage* delays, it never rejects (docs/architecture.md, rule 7): before each batch
the job checks that both topics exist and have no open transaction (read_committed end offset =
high watermark; a publish in flight may hold versions appended before our events were ingested).
If not, the batch waits, polling, up to ``--master-data-timeout``; then the job stops with an
error and nothing of the batch is written. Run it again later: it resumes from its checkpoint.

The profiles are read inside each micro-batch as a Spark batch read of the compacted topics
(``kafka.isolation.level=read_committed``, earliest to the end offsets just checked), collected
on the driver, reused while those end offsets stay the same, and broadcast to the tasks, where
``join_as_of`` (pure pandas) picks each event's versions: no shuffle, no join in the plan. This
assumes master data fits in memory (millions of versions do; beyond that, a broadcast-hash join
in Spark with the same rule is the way).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from ikkai.contract.codec import RecordCodec, default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import IkkaiError
from spark_jobs.enrich.master_data import CUSTOMER_SCHEMA, CUSTOMERS_TOPIC, MERCHANT_SCHEMA, MERCHANTS_TOPIC

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EndOffsets = tuple[tuple[str, int, int], ...]


class MasterDataUnavailable(IkkaiError):
    """The master-data topics could not be read completely within the timeout: the batch waits for a restart."""

    def __init__(self, topic: str, problem: str, waited_s: float) -> None:
        super().__init__(
            f"master data {topic}: {problem} (waited {waited_s:.0f} s); nothing of this batch was written",
            fix="restore or finish publishing the master data, then start the job again: it resumes where it was",
        )
        self.topic = topic
        self.problem = problem


@dataclass(frozen=True)
class MasterDataTopics:
    merchants: str = MERCHANTS_TOPIC
    customers: str = CUSTOMERS_TOPIC


# (topic attribute, schema, id column, the profile columns the event gets, their output names)
_SIDES = (
    ("merchants", MERCHANT_SCHEMA, "merchant_id", {"risk_tier": "merchant_risk_tier", "country": "merchant_country"},
     "merchant_profile_as_of"),
    ("customers", CUSTOMER_SCHEMA, "customer_id",
     {"segment": "customer_segment", "home_country": "customer_home_country"}, "customer_profile_as_of"),
)  # fmt: skip


def end_offsets(cluster: KafkaContext, topic: str) -> tuple[EndOffsets | None, str | None]:
    """((topic, partition, read_committed end), ...) or (None, why the topic cannot be read completely)."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(cluster.client_config())
    try:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return None, "the topic does not exist or is unavailable"
        partitions = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
        ends = {}
        for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            latest = {tp: OffsetSpec.latest() for tp in partitions}  # type: ignore[no-untyped-call]
            futures = admin.list_offsets(latest, isolation_level=level, request_timeout=10)
            ends[level] = {tp.partition: f.result().offset for tp, f in futures.items()}
    except KafkaException as exc:
        return None, f"cannot list its offsets: {exc}"
    committed, written = ends[IsolationLevel.READ_COMMITTED], ends[IsolationLevel.READ_UNCOMMITTED]
    open_partitions = [p for p in committed if committed[p] != written[p]]
    if open_partitions:
        return None, f"a publish is in flight (open transaction on partitions {open_partitions})"
    return tuple((topic, p, committed[p]) for p in sorted(committed)), None


def wait_for_master_data(cluster: KafkaContext, topic: str, timeout_s: float, poll_s: float = 1.0) -> EndOffsets:
    start = time.monotonic()
    reported = False
    while True:
        offsets, problem = end_offsets(cluster, topic)
        if offsets is not None:
            return offsets
        waited = time.monotonic() - start
        if waited >= timeout_s:
            raise MasterDataUnavailable(topic, problem or "unreadable", waited)
        if not reported:
            sys.stderr.write(f"enrich: holding the batch: master data {topic}: {problem}\n")
            sys.stderr.flush()
            reported = True
        time.sleep(poll_s)


def _decode_profiles(chunks: Iterator[pd.DataFrame], codec: RecordCodec, schema: str, id_column: str,
                     fields: tuple[str, ...]) -> Iterator[pd.DataFrame]:  # fmt: skip
    for chunk in chunks:
        rows = []
        for row in chunk.itertuples(index=False):
            profile = codec.decode(schema, bytes(row.value))
            rows.append((profile[id_column], int(profile["valid_from"]), int(row.published_at), int(row.partition),
                         int(row.offset), *(profile[f] for f in fields)))  # fmt: skip
        yield pd.DataFrame(
            rows,
            columns=["p_id", "p_valid_from", "p_published_at", "p_partition", "p_offset", *(f"p_{f}" for f in fields)],
        )


Snapshot = dict[str, pd.DataFrame]  # side ("merchants", "customers") -> its versions, read up to known end offsets


def _or_none(column: pd.Series) -> Any:
    values = column.astype(object)
    return values.where(values.notna(), None).to_numpy()


def join_as_of(events: pd.DataFrame, snapshot: Snapshot) -> pd.DataFrame:
    """``events`` (same rows, same order) plus, per side, the columns of the version in force (pure).

    A version qualifies when its id matches, ``valid_from <= event_time`` and ``published_at <=
    ingested_at``; the newest valid_from wins, then the latest publish, then the highest
    (partition, offset). No qualifying version: the side's columns are null (the encoder turns
    them into the documented defaults).
    """
    out = events.reset_index(drop=True)
    for side, _, id_column, fields, as_of in _SIDES:
        versions = snapshot[side]
        targets = [*fields.values(), as_of]
        if out.empty or versions.empty:
            out = out.assign(**{t: None for t in targets})
            continue
        left = pd.DataFrame({"_row": range(len(out)), "p_id": out[id_column], "_t": out["event_time"].astype("int64"),
                             "_ingested": out["ingested_at"].astype("int64")})  # fmt: skip
        pairs = left.merge(versions, on="p_id", how="inner")
        pairs = pairs[(pairs["p_valid_from"] <= pairs["_t"]) & (pairs["p_published_at"] <= pairs["_ingested"])]
        pairs = pairs.sort_values(["_row", "p_valid_from", "p_published_at", "p_partition", "p_offset"], kind="stable")
        chosen = pairs.drop_duplicates("_row", keep="last").set_index("_row")
        picked = chosen.reindex(range(len(out)))
        columns = {target: _or_none(picked[f"p_{source}"]) for source, target in fields.items()}
        columns[as_of] = picked["p_valid_from"].astype("Int64").to_numpy()
        out = out.assign(**columns)
    return out


@dataclass
class MasterData:
    """Reads the profile topics per batch (cached while their end offsets stay the same) into a ``Snapshot``."""

    cluster: KafkaContext
    topics: MasterDataTopics = field(default_factory=MasterDataTopics)
    timeout_s: float = 600.0
    codec: RecordCodec = field(default_factory=default_codec, repr=False)  # how profiles are read
    _cache: dict[str, tuple[EndOffsets, pd.DataFrame]] = field(default_factory=dict, repr=False)

    def versions(self, spark: SparkSession, side: str, schema: str, id_column: str,
                 fields: tuple[str, ...]) -> pd.DataFrame:  # fmt: skip
        from pyspark.sql import functions as F

        topic = getattr(self.topics, side)
        offsets = wait_for_master_data(self.cluster, topic, self.timeout_s)
        cached = self._cache.get(topic)
        if cached is not None and cached[0] == offsets:
            return cached[1]
        codec = self.codec
        columns = ", ".join(f"p_{f} string" for f in fields)
        schema_ddl = f"p_id string, p_valid_from long, p_published_at long, p_partition int, p_offset long, {columns}"
        ending = "{" + ", ".join(f'"{p}": {end}' for _, p, end in offsets) + "}"
        raw = (
            spark.read.format("kafka")
            .options(**self.cluster.spark_options())
            .option("subscribe", topic)
            .option("kafka.isolation.level", "read_committed")
            .option("startingOffsets", "earliest")
            .option("endingOffsets", '{"' + topic + '": ' + ending + "}")
            .load()
        )
        decoded = raw.select("value", "partition", "offset", F.unix_millis("timestamp").alias("published_at"))
        frame = decoded.mapInPandas(lambda c: _decode_profiles(c, codec, schema, id_column, fields), schema_ddl)
        versions = frame.toPandas()
        self._cache[topic] = (offsets, versions)
        return versions

    def snapshot(self, spark: SparkSession) -> Snapshot:
        """Every side's versions, after waiting out an outage (see the module docstring)."""
        return {side: self.versions(spark, side, schema, id_column, tuple(fields))
                for side, schema, id_column, fields, _ in _SIDES}  # fmt: skip

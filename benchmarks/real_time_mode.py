"""Spark 4.3's Real-Time Mode tried on ikkai's infer shape: what it refuses, and the latency where it runs.

Real-Time Mode (``trigger(realTime="5 seconds")``) runs long batches whose tasks process records as
they arrive instead of one micro-batch at a time. Spark 4.3 checks every query against an allowlist
of operators and sinks (``RealTimeModeAllowlist``): the sinks are the console, the memory sink, the
Kafka sink and ``foreach`` writers (``ForeachWriterTable``); the operators are JVM ones (project,
filter, broadcast joins, some stateful ones), no Python UDF, no ``mapInArrow``.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS),
then runs each query below on its own fresh input topic fed ``--rate`` payments/s for ``--seconds``
and reports whether Spark started it, and if so p50/p99/max of produced → arrived at the output (a
read_committed consumer; arrival wall clock):

1. ``infer as it is``: the model as ``mapInArrow``, the sink as ``foreachBatch`` (today's plan);
2. ``mapInArrow + Spark's Kafka sink``: the model as ``mapInArrow`` before an allowed sink;
3. ``Python foreach writer``: no Python operator; the records reach a Python ``foreach`` writer, which
   produces each one (the place the model and a transaction would have to go);
4. ``JVM only``: the input copied to the output by Spark's own Kafka sink, no Python at all: the
   floor Real-Time Mode gives on this machine (at-least-once).

Usage: .venv/bin/python -m benchmarks.real_time_mode [--rate 200] [--seconds 20] [--batch-duration "5 seconds"]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.harness import bench_stack, percentile, print_table
from ikkai.contract.kafka import KafkaContext

SETTLE_S = 20.0  # a started query's first long batch: records produced before it runs are not measured


class ForeachProducer:
    """A Python ``foreach`` writer producing each row to ``topic``: where the model would run in Real-Time Mode."""

    def __init__(self, cluster: KafkaContext, topic: str) -> None:
        self.cluster, self.topic = cluster, topic  # pickled into the task: its security travels as a file's path
        self.producer: Any = None

    def open(self, partition_id: int, epoch_id: int) -> bool:
        from confluent_kafka import Producer

        self.producer = Producer(self.cluster.producer_config(**{"linger.ms": 1}))
        return True

    def process(self, row: Any) -> None:
        self.producer.produce(self.topic, key=row.key, value=row.value)
        self.producer.poll(0)

    def close(self, error: BaseException | None) -> None:
        if self.producer is not None:
            self.producer.flush(30)


def queries(cluster: KafkaContext, duration: str) -> dict[str, Callable[[Any, str, str, str], Any]]:
    """Name → start(spark, input topic, output topic, checkpoint) of each query tried."""

    def source(spark: Any, topic: str) -> Any:
        reader = spark.readStream.format("kafka").options(**cluster.spark_options()).option("subscribe", topic)
        return reader.option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest").load()

    def infer_as_it_is(spark: Any, topic: str, output: str, checkpoint: str) -> Any:
        def copy(batches: Iterator[Any]) -> Iterator[Any]:
            yield from batches

        def write(batch: Any, _batch_id: int) -> None:
            (batch.write.format("kafka").options(**cluster.spark_options())
             .option("topic", output).save())  # fmt: skip

        rows = source(spark, topic).select("key", "value").mapInArrow(copy, "key binary, value binary")
        return (rows.writeStream.outputMode("update").option("checkpointLocation", checkpoint)
                .foreachBatch(write).trigger(realTime=duration).start())  # fmt: skip

    def model_before_kafka_sink(spark: Any, topic: str, output: str, checkpoint: str) -> Any:
        def copy(batches: Iterator[Any]) -> Iterator[Any]:
            yield from batches

        rows = source(spark, topic).select("key", "value").mapInArrow(copy, "key binary, value binary")
        stream = rows.writeStream.format("kafka").options(**cluster.spark_options()).option("topic", output)
        return stream.outputMode("update").option("checkpointLocation", checkpoint).trigger(realTime=duration).start()

    def python_foreach(spark: Any, topic: str, output: str, checkpoint: str) -> Any:
        return (source(spark, topic).select("key", "value").writeStream.outputMode("update")
                .option("checkpointLocation", checkpoint).foreach(ForeachProducer(cluster, output))
                .trigger(realTime=duration).start())  # fmt: skip

    def jvm_only(spark: Any, topic: str, output: str, checkpoint: str) -> Any:
        return (source(spark, topic).select("key", "value").writeStream.format("kafka")
                .options(**cluster.spark_options()).option("topic", output).outputMode("update")
                .option("checkpointLocation", checkpoint).trigger(realTime=duration).start())  # fmt: skip

    return {"infer as it is (mapInArrow + foreachBatch)": infer_as_it_is,
            "mapInArrow + Spark's Kafka sink": model_before_kafka_sink,
            "Python foreach writer": python_foreach, "JVM only (Spark's Kafka sink)": jvm_only}  # fmt: skip


def refusal(error: BaseException) -> str:
    """Spark's reason in a line: the limitation named, without the class's package or the bypass advice."""
    text = " ".join(str(error).split())
    reason = text.split("limitation: ", 1)[-1].split(" To bypass", 1)[0]
    return re.sub(r"(?:[a-z_][a-z0-9_]*\.)+(?=[A-Z])", "", reason)[:200]


def feed_and_measure(cluster: KafkaContext, topic: str, output: str, rate: float, seconds: float) -> list[float]:
    """Produce ``rate``/s unique keys for ``seconds``; the latency in ms of each, as its copy arrives at ``output``."""
    from confluent_kafka import Consumer, Producer

    context = cluster
    consumer = Consumer(context.consumer_config(f"rtm-{time.time_ns()}", **{"auto.offset.reset": "earliest"}))
    consumer.subscribe([output])
    producer = Producer(context.producer_config(**{"linger.ms": 1}))
    count = int(rate * seconds)
    sent: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}
    began = time.monotonic()
    for i in range(count):
        pause = began + i / rate - time.monotonic()
        while pause > 0:
            message = consumer.poll(min(pause, 0.05))
            if message is not None and message.error() is None and (key := message.key()) in sent and key:
                arrived.setdefault(key, time.time())
            pause = began + i / rate - time.monotonic()
        key = f"rtm-{i}".encode()
        sent[key] = time.time()
        producer.produce(topic, key=key, value=key)
        producer.poll(0)
    producer.flush(30)
    give_up_at = time.monotonic() + 60
    while len(arrived) < len(sent) and time.monotonic() < give_up_at:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None and (key := message.key()) in sent and key:
            arrived.setdefault(key, time.time())
    consumer.close()
    if len(arrived) < len(sent):
        raise SystemExit(f"{output}: {len(sent) - len(arrived)} of {len(sent)} records never arrived")
    return [(arrived[key] - at) * 1000 for key, at in sent.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200, help="payments per second fed to each query")
    parser.add_argument("--seconds", type=float, default=20, help="how long each query is fed")
    parser.add_argument("--batch-duration", default="5 seconds", help="Real-Time Mode's long batch")
    args = parser.parse_args()
    from spark_jobs.session import spark_session
    from stack.kit.topic_io import create_topic, unique

    rows: list[list[object]] = []
    with bench_stack("rtm") as (cluster, _, scratch):
        spark = spark_session("ikkai-real-time-mode")
        try:
            for name, start in queries(cluster, args.batch_duration).items():
                topic, output = (create_topic(cluster, unique(kind), 2) for kind in ("rtm.in", "rtm.out"))
                checkpoint = str(scratch / unique("ck"))
                try:
                    query = start(spark, topic, output, checkpoint)
                    time.sleep(SETTLE_S)
                    if query.exception() is not None:
                        raise RuntimeError(str(query.exception()))
                except Exception as refused:  # noqa: BLE001 - the outcome of the try, printed
                    rows.append([name, f"refused: {refusal(refused)}", None, None, None])
                    print(f"{name}: refused: {refused}", file=sys.stderr, flush=True)
                    continue
                try:
                    latencies = feed_and_measure(cluster, topic, output, args.rate, args.seconds)
                finally:
                    query.stop()
                p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
                rows.append([name, "ran", p50, p99, max(latencies)])
                print(f"{name}: ran, p99 {p99:.0f} ms", file=sys.stderr, flush=True)
        finally:
            spark.stop()
    print_table(
        f"Real-Time Mode (trigger realTime={args.batch_duration!r}), {args.rate:g} payments/s for {args.seconds:g} s: "
        "produced -> arrived at the output",
        ["QUERY", "OUTCOME", "P50 MS", "P99 MS", "MAX MS"], rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()

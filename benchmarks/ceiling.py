"""The machine's ceiling: what the broker, the Python Kafka client, Avro and the model code can do at all.

Starts an embedded stack in a temporary home (or uses the cluster named by IKKAI_BOOTSTRAP_SERVERS /
IKKAI_CONNECT_URL) and measures, with the record size of the infer job's decisions:

* Kafka's own perf tools from the stack's jars (``org.apache.kafka.tools.ProducerPerformance`` /
  ``ConsumerPerformance``, run with java on the ``ikkai setup`` classpath): idempotent acks=all
  producer, the same in 100 ms transactions, and a consumer;
* confluent-kafka from Python (the client the transactional sink uses): produce, produce in
  transactions of ``--txn-records`` records, consume read_committed;
* the single-object Avro codec (``ikkai.contract.codec``): encode of a decision, decode of
  a payment;
* ``fraud_decisions.decide`` in one process, no Spark: decode, point-in-time features, score and
  encode, i.e. what one core can do for the infer job's own logic.

Usage: .venv/bin/python -m benchmarks.ceiling [--records 200000] [--python-records 100000]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

from benchmarks.harness import bench_stack, java, kafka_classpath, print_table
from ikkai.contract.kafka import KafkaContext
from stack.kit.topic_io import create_topic, unique

Row = list[object]


def parse_producer_performance(output: str) -> tuple[float, float, float]:
    """(records/s, MB/s, p99 ms) from ProducerPerformance's summary line."""
    lines = [line for line in output.splitlines() if "records sent" in line and "99th" in line]
    if not lines:
        raise ValueError(f"no summary line in ProducerPerformance output: {output[-500:]!r}")
    rate, mb = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\)", lines[-1]).groups()  # type: ignore[union-attr]
    p99 = re.search(r"([\d.]+) ms 99th", lines[-1]).group(1)  # type: ignore[union-attr]
    return float(rate), float(mb), float(p99)


def parse_consumer_performance(output: str) -> tuple[float, float]:
    """(records/s, MB/s) from ConsumerPerformance's CSV (header line, then one data line)."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    names = [n.strip() for n in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    return float(row["nMsg.sec"]), float(row["MB.sec"])


def kafka_tool(main_class: str, *args: str) -> str:
    command = [java(), "-Xmx512m", "-cp", kafka_classpath(), main_class, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{main_class} failed:\n{result.stderr[-2000:]}")
    return result.stdout


def perf_tools(cluster: KafkaContext, records: int, size: int) -> list[Row]:
    rows: list[Row] = []
    props = [f"bootstrap.servers={cluster.bootstrap_servers}", "acks=all", "enable.idempotence=true", "linger.ms=5"]
    for label, extra in (
        ("idempotent, acks=all", []),
        ("transactions of 100 ms", ["--transactional-id", unique("bench.perf"), "--transaction-duration-ms", "100"]),
    ):
        topic = create_topic(cluster, unique("bench.perf"), 2)
        output = kafka_tool(
            "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
            "--record-size", str(size), "--throughput", "-1", *extra, "--producer-props", *props,
        )  # fmt: skip
        rate, mb, p99 = parse_producer_performance(output)
        rows.append(["kafka ProducerPerformance", label, records, rate, mb, p99])
    output = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", cluster.bootstrap_servers, "--topic", topic,
        "--messages", str(records), "--timeout", "60000",
    )  # fmt: skip
    rate, mb = parse_consumer_performance(output)
    rows.append(["kafka ConsumerPerformance", "from the transactional topic", records, rate, mb, None])
    return rows


def python_client(cluster: KafkaContext, records: int, size: int, txn_records: int) -> list[Row]:
    from confluent_kafka import Consumer, Producer

    rows: list[Row] = []
    value = b"x" * size
    keys = [f"pay-{i:09d}".encode() for i in range(records)]
    base = cluster.producer_config(**{"linger.ms": 5})
    topic = create_topic(cluster, unique("bench.py"), 2)
    producer = Producer(base)
    started = time.perf_counter()
    for key in keys:
        _produce(producer, topic, key, value)
    producer.flush(120)
    seconds = time.perf_counter() - started
    rows.append(["confluent-kafka produce", "idempotent, acks=all", records, records / seconds,
                 records * size / seconds / 1e6, None])  # fmt: skip
    topic = create_topic(cluster, unique("bench.py.txn"), 2)
    producer = Producer({**base, "transactional.id": unique("bench.py")})
    producer.init_transactions(30)
    started = time.perf_counter()
    for start in range(0, records, txn_records):
        producer.begin_transaction()
        for key in keys[start : start + txn_records]:
            _produce(producer, topic, key, value)
        producer.commit_transaction(60)
    seconds = time.perf_counter() - started
    rows.append(["confluent-kafka produce", f"transactions of {txn_records:,}", records, records / seconds,
                 records * size / seconds / 1e6, None])  # fmt: skip
    consumer = Consumer(cluster.consumer_config(unique("bench.py"), **{
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    }))  # fmt: skip
    consumer.subscribe([topic])
    seen, started = 0, time.perf_counter()
    while seen < records and time.perf_counter() - started < 120:
        for message in consumer.consume(10_000, 0.5):
            seen += message.error() is None
    seconds = time.perf_counter() - started
    consumer.close()
    rows.append(["confluent-kafka consume", "read_committed", seen, seen / seconds, seen * size / seconds / 1e6, None])
    return rows


def _produce(producer: object, topic: str, key: bytes, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key)  # type: ignore[attr-defined]
            return
        except BufferError:
            producer.poll(0.05)  # type: ignore[attr-defined]


def codec_and_model(records: int) -> tuple[list[Row], int]:
    """Rows for Avro and decide(), and the average size of an encoded decision (the Kafka rows' record size)."""
    import pandas as pd

    from demo.payments_simulation import payment_records, simulate
    from ikkai.contract.codec import default_codec
    from spark_jobs.infer.fraud_decisions import Topics, decide
    from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, FraudModel, load_snapshots

    codec = default_codec()
    payments = payment_records(simulate(5, payments=records).payments)
    started = time.perf_counter()
    encoded = [codec.encode("payment_event", p, version=1) for p in payments]
    encode_rate = records / (time.perf_counter() - started)
    started = time.perf_counter()
    for value in encoded:
        codec.decode("payment_event", value)
    decode_rate = records / (time.perf_counter() - started)
    rows = pd.DataFrame({
        "key": [str(p["payment_id"]).encode() for p in payments], "value": encoded,
        "topic": "events.payments", "partition": 0, "offset": range(records),
    })  # fmt: skip
    model, snapshots = FraudModel.load(MODEL_PATH), load_snapshots(FEATURES_PATH)
    started = time.perf_counter()
    out = pd.concat(
        [decide(rows.iloc[i : i + 10_000], model, snapshots, codec, Topics()) for i in range(0, records, 10_000)]
    )
    decide_rate = records / (time.perf_counter() - started)
    decisions = out[out["topic"] == Topics().decisions]["value"]
    size = int(sum(len(v) for v in decisions) / max(1, len(decisions)))
    return [
        ["avro single-object", "encode payment_event", records, encode_rate, None, None],
        ["avro single-object", "decode payment_event", records, decode_rate, None, None],
        ["fraud_decisions.decide", "one process, chunks of 10,000", records, decide_rate, None, None],
    ], size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records for Kafka's perf tools")
    parser.add_argument("--python-records", type=int, default=100_000, help="records for confluent-kafka and Avro")
    parser.add_argument("--txn-records", type=int, default=10_000, help="records per Python transaction")
    args = parser.parse_args()
    model_rows, size = codec_and_model(min(args.python_records, 50_000))
    print(f"record size: {size} bytes (the average encoded decision)", file=sys.stderr, flush=True)
    with bench_stack("ceiling") as (cluster, _, _):
        rows = perf_tools(cluster, args.records, size)
        rows += python_client(cluster, args.python_records, size, args.txn_records)
    rows += model_rows
    print_table(
        f"ceiling ({size}-byte records, 2 partitions, one broker)",
        ["WHAT", "HOW", "RECORDS", "RECORDS/S", "MB/S", "P99 MS"],
        rows,
    )


if __name__ == "__main__":
    main()

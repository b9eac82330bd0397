"""A stand-in for one Python worker of the sink, as its own process: writes partitions through the executor writer.

``python -c 'from tests.spark_jobs.sink.sink_worker import main; main()' '<json>'`` writes, for each
partition named, the records of input offsets ``start..start+count`` of input partition 0 as one
``write_through_executor`` call of the given executor, and prints the results as JSON lines. An
error exits 3 with its class and text on stderr, as a failed Spark task would.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from ikkai.contract.kafka import KafkaContext
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.executor_writer_client import write_through_executor
from spark_jobs.sink.record import Record


def config(job: dict[str, Any]) -> SinkConfig:
    return SinkConfig(
        app="test", query=job["query"], cluster=KafkaContext.from_environment(job["bootstrap"]),
        output_topics=(job["topic"],),
        partitions=job["partitions"], order_by=("seq",), source_topic="test.in", commits_topic=job["commits"],
        transaction_timeout_ms=job["transaction_timeout_ms"], retry_deadline_s=job["retry_deadline_s"],
        transactional_writer="executor",
    )  # fmt: skip


def records(topic: str, partition: int, start: int, count: int) -> list[Record]:
    return [(topic, f"pay-{i}".encode(), f"p{partition}-v{i}".encode(), None, None, 0, i)
            for i in range(start, start + count)]  # fmt: skip


def main() -> None:
    job = json.loads(sys.argv[1])
    sink = config(job)
    try:
        for partition in job["write"]:
            batch = records(job["topic"], partition, job["start"], job["count"])
            result = write_through_executor(sink, job["batch"], partition, batch, executor=job["executor"])
            print(json.dumps(dataclasses.asdict(result)), flush=True)
    except Exception as exc:  # noqa: BLE001  # the task's failure, as Spark would report it
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        sys.exit(3)


if __name__ == "__main__":
    main()

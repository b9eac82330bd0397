"""The profile's pure parts: which stage a sampled stack is charged to, and CPU per kind of process."""

from __future__ import annotations

from collections import Counter

from benchmarks.enrich_profile import (
    DRIVER,
    OTHER_JVM,
    OTHER_OURS,
    SPARK_DRIVER,
    SPARK_WORKER,
    WAITING,
    WORKERS,
    cpu_delta,
    jvm_samples_by_stage,
    jvm_stage_of,
    samples_by_stage,
    stage_of,
    stage_rows,
)

WORKER = 'process 10:"python -m spark_jobs.enrich";process 12:"python -m spark_jobs.python_daemon"'
MAIN = "main (/x/pyspark/worker.py:1)"
CLASSIFY = "run (/repo/spark_jobs/enrich/records.py:120)"


def test_the_innermost_frame_of_ours_names_the_stage() -> None:
    parse = [
        MAIN,
        CLASSIFY,
        "parse_record (/repo/spark_jobs/enrich/parse.py:290)",
        "loads (/usr/lib/json/__init__.py:3)",
    ]
    assert stage_of(parse, driver=False) == "parse and validate"
    state = [MAIN, CLASSIFY, "to_json (/repo/spark_jobs/enrich/dedupe.py:77)", "dumps (/usr/lib/json/__init__.py:1)"]
    assert stage_of(state, driver=False) == "event-time gate: state to/from JSON"
    assert stage_of([MAIN, CLASSIFY, "decide (/repo/spark_jobs/enrich/dedupe.py:50)"], driver=False).endswith("evict")
    assert stage_of([MAIN, CLASSIFY, "concat (/x/pandas/core/reshape/concat.py:9)"], driver=False).startswith(
        "classify"
    )
    encode = [
        MAIN,
        "encode_events (/repo/spark_jobs/enrich/records.py:275)",
        "_varints (/repo/spark_jobs/avro_batch.py:1)",
    ]
    assert stage_of(encode, driver=False).startswith("Avro")
    assert stage_of([MAIN, "_produce (/repo/spark_jobs/sink/partition_transactions.py:1)"], False).startswith("trans")


def test_a_stack_without_our_code_is_sparks_own_python() -> None:
    assert stage_of([MAIN, "dump_stream (/x/pyspark/sql/pandas/serializers.py:5)"], driver=False) == SPARK_WORKER
    assert stage_of(["send_command (/x/py4j/clientserver.py:5)"], driver=True) == SPARK_DRIVER
    waits = [
        "__call__ (/repo/spark_jobs/enrich/job.py:9)",
        "send_command (/x/py4j/x.py:5)",
        "SocketIO.readinto (s.py:1)",
    ]
    assert stage_of(waits, driver=True) == WAITING
    daemon = ["main (/repo/spark_jobs/python_daemon.py:120)", "manager (/x/pyspark/daemon.py:275)"]
    assert stage_of(daemon, driver=False) == WAITING  # the daemon in its select loop
    forked = [*daemon[:1], "worker (/x/pyspark/daemon.py:90)", "dump_stream (/x/pyspark/serializers.py:73)"]
    assert stage_of(forked, driver=False) == SPARK_WORKER  # the daemon's wrapper below a worker is no stage
    assert stage_of(["f (/repo/ikkai/settings.py:1)"], driver=False) != SPARK_WORKER
    assert stage_of(["f (/repo/spark_jobs/unknown_place/x.py:1)"], driver=False) != OTHER_OURS  # the job shell's


def test_raw_samples_are_counted_per_stage_and_the_driver_is_told_apart() -> None:
    lines = [
        f"{WORKER};{MAIN};{CLASSIFY};parse_record (/repo/spark_jobs/enrich/parse.py:290) 7",
        f"{WORKER};{MAIN};dump_stream (/x/pyspark/sql/pandas/serializers.py:5) 3",
        'process 10:"python -m spark_jobs.enrich";send_command (/x/py4j/clientserver.py:5) 2',
        "not a sample",
    ]
    counts = samples_by_stage(lines, driver_pid=10)
    assert counts == {(WORKERS, "parse and validate"): 7, (WORKERS, SPARK_WORKER): 3, (DRIVER, SPARK_DRIVER): 2}


def test_cpu_is_summed_per_kind_and_a_process_born_in_the_window_counts_from_zero() -> None:
    before = {1: ("java", 10.0), 2: (WORKERS, 1.0), 4: (DRIVER, 2.0)}
    after = {1: ("java", 14.5), 2: (WORKERS, 3.0), 3: (WORKERS, 0.5), 4: (DRIVER, 2.25)}
    assert cpu_delta(before, after) == {"java": 4.5, WORKERS: 2.5, DRIVER: 0.25}


def test_each_roles_cpu_is_shared_over_its_running_samples_and_waiting_gets_none() -> None:
    counts = Counter({(WORKERS, "parse and validate"): 30, (WORKERS, SPARK_WORKER): 10, (DRIVER, WAITING): 90,
                      (DRIVER, SPARK_DRIVER): 10})  # fmt: skip
    rows = {(r[0], r[1]): (r[3], r[4]) for r in stage_rows(counts, {"java": 9.0, WORKERS: 4.0, DRIVER: 0.5}, 1000)}
    assert rows[(WORKERS, "parse and validate")] == ("75.0%", 3.0)  # 3 of the workers' 4 CPU s, per 1,000 lines
    assert rows[(WORKERS, SPARK_WORKER)] == ("25.0%", 1.0)
    assert rows[(DRIVER, SPARK_DRIVER)] == ("100.0%", 0.5)  # the driver's waiting samples take none of its CPU
    assert rows[(DRIVER, WAITING)] == ("", 0.0)


def test_a_jvm_sample_goes_to_the_first_known_part_from_its_leaf() -> None:
    kafka = [
        "java.util.HashMap",
        "org.apache.kafka.clients.consumer.internals.Fetcher",
        "org.apache.spark.sql.kafka010.X",
    ]
    assert jvm_stage_of(kafka).startswith("Kafka")
    state = ["org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider", "org.apache.spark.sql.X"]
    assert jvm_stage_of(state).startswith("state store")
    assert jvm_stage_of(["org.apache.spark.sql.catalyst.expressions.GeneratedClass"]).startswith("Spark SQL operators")
    assert jvm_stage_of(["java.lang.Thread"]) == OTHER_JVM


def test_a_recording_is_counted_by_stage() -> None:
    def sample(*classes: str) -> dict[str, object]:
        frames = [{"method": {"type": {"name": c.replace(".", "/")}, "name": "m"}} for c in classes]
        return {"type": "jdk.ExecutionSample", "values": {"stackTrace": {"frames": frames}}}

    arrow = [sample("org.apache.arrow.vector.X"), sample("org.apache.arrow.memory.Y")]
    recording = {"recording": {"events": [*arrow, sample("jdk.internal.misc.Unsafe", "org.apache.kafka.common.Z")]}}
    counts = jvm_samples_by_stage(recording)
    assert counts == {"Arrow (the JVM's side of the Python exchange)": 2, "Kafka clients (the source's consumer)": 1}

"""A stack with a Spark standalone cluster of two workers and two Connect workers: it comes up, status lists every
process, the infer job runs on the cluster (its executors in JVMs of their own, its code from the application zip)
and decides each event exactly once, and down leaves no process behind.

One cluster for the module (the tests run in file order; the last one stops it), small data.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator

import psutil
import pytest

from demo.payments_simulation import payment_records, simulate
from demo.pipeline_io import create_topic, produce_payments, unique
from ikkai.contract.codec import default_codec
from ikkai.errors import IkkaiError
from ikkai.settings import jars_dir
from stack.local_stack import LocalStack
from stack.processes import stack_processes
from stack.spark_cluster import shared_dir, work_dir
from tests.cli.cli_runner import run_ikkai
from tests.kafka_helpers import read_all

pytestmark = pytest.mark.integration

SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
COMPONENTS = ["broker", "connect", "connect-2", "spark-master", *SPARK_WORKERS]
EVENTS = 300
PARTITIONS = 2
JOINED = re.compile(r"Joined group at generation (\d+) .*leaderUrl='([^']+)'")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("cluster"), jars_dir(), spark_workers=2, connect_workers=2)
    try:
        local.up()
    except IkkaiError as exc:
        local.down()
        pytest.skip(f"the embedded stack with a Spark cluster cannot start here: {exc}")
    try:
        yield local
    finally:
        local.down()


def env_for(cluster: LocalStack) -> dict[str, str]:
    return {"IKKAI_HOME": str(cluster.home), "IKKAI_JARS_DIR": str(jars_dir())}


def test_status_lists_the_spark_cluster_and_both_connect_workers(cluster: LocalStack) -> None:
    result = run_ikkai("stack", "status", "-o", "json", env=env_for(cluster))
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert [c["name"] for c in status["components"]] == COMPONENTS
    assert all(c["healthy"] and len(c["pids"]) == 1 for c in status["components"]), status["components"]
    assert status["spark_master_url"] == cluster.spark_master_url()
    assert status["spark_master_url"].startswith("spark://127.0.0.1:")
    assert status["connect_urls"] == cluster.connect_urls()
    assert len(set(status["connect_urls"])) == 2
    # One group: each worker's last join names the same generation and the same leader.
    joins = [JOINED.findall(cluster.log_file(name).read_text())[-1] for name in ("connect", "connect-2")]
    assert joins[0] == joins[1], joins
    assert joins[0][1].rstrip("/") in status["connect_urls"]


def test_up_again_keeps_every_port(cluster: LocalStack) -> None:
    before = json.loads(cluster.state_file.read_text())
    pids = stack_processes(cluster.home)
    cluster.up()  # already running: a no-op
    after = json.loads(cluster.state_file.read_text())
    assert after["cluster_ports"] == before["cluster_ports"]
    assert stack_processes(cluster.home) == pids


def test_infer_on_the_cluster_decides_each_event_exactly_once(cluster: LocalStack) -> None:
    bootstrap = cluster.kafka_cluster().bootstrap_servers
    name = unique("cluster")
    topic = create_topic(bootstrap, f"events.{name}", PARTITIONS)
    payments = payment_records(simulate(7, payments=EVENTS).payments)
    produce_payments(bootstrap, topic, payments, PARTITIONS)
    outputs = {kind: create_topic(bootstrap, f"{kind}.{name}", PARTITIONS) for kind in ("decisions", "outbox", "dlq")}
    master = cluster.spark_master_url()
    assert master is not None
    result = run_ikkai(
        "jobs", "run", "infer", "--master", master, "--bootstrap", bootstrap, "--input", topic,
        "--decisions", outputs["decisions"], "--outbox", outputs["outbox"], "--dlq", outputs["dlq"],
        "--checkpoint", str(shared_dir(cluster.home) / name), "--query", name, "--max-offsets-per-trigger", "100",
        env=env_for(cluster), timeout=1500,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]

    codec = default_codec()
    decisions = [codec.decode("fraud_decision", value) for _, value in read_all(bootstrap, outputs["decisions"])]
    assert Counter(d["event_id"] for d in decisions) == Counter(str(p["event_id"]) for p in payments)
    assert read_all(bootstrap, outputs["dlq"]) == []
    # The job ran on executors of both workers, in JVMs of their own, each given the application zip.
    for worker in SPARK_WORKERS:
        stderr = [path.read_text() for path in work_dir(cluster.home, worker).glob("app-*/*/stderr")]
        assert stderr, f"{worker} launched no executor"
        assert any("/files/ikkai-app-" in text for text in stderr), f"{worker}'s executor got no application zip"


def test_down_stops_every_process(cluster: LocalStack) -> None:
    live = stack_processes(cluster.home)
    assert sorted(live) == sorted(COMPONENTS)
    pids = {pid for found in live.values() for pid in found}
    pids |= {child.pid for pid in list(pids) for child in psutil.Process(pid).children(recursive=True)}  # executors
    stopped = cluster.down()
    assert set(stopped) >= {pid for found in live.values() for pid in found}
    assert stack_processes(cluster.home) == {}
    left = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"still running after down: {left}"
    assert json.loads(cluster.state_file.read_text())["cluster_ports"], "the ports are kept for the next up"

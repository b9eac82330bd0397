"""``ikkai serve`` outlives the broker: the real command, as ``make demo`` starts it, over the killable embedded
stack, while its health view is sampled in a loop and the broker is killed and started again three times.

After each restart the process is alive, ``/healthz`` answers and a sink group's committed offsets (a
``connect-*`` group, read in a child process: ``deploy.eos_view.group_offsets``) read back within a bounded
number of samples. Before each restart the broker is stopped (SIGSTOP: it accepts connections and answers
nothing, so every read waits for its timeout) and four viewers at once do not queue behind one another.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.eos_view.consumer_lag import SINK_GROUP_PREFIX
from deploy.eos_view.health import SAMPLE_SECONDS, TIMEOUT_SECONDS
from ikkai.contract.kafka import KafkaContext
from ikkai.settings import Endpoints
from stack.local_stack import LocalStack
from stack.ports import free_port
from tests.cli.cli_runner import IKKAI, ROOT
from tests.deploy.test_page import SHIPPED, TOKEN, logged_in
from tests.deploy.test_page_health import texts

ENV = "dev"
RESTARTS = 3
RECOVERY_SAMPLES = 12  # health samples after the broker is back within which the lag must read again
VIEWERS = 4
QUICK_SECONDS = 5.0  # a viewer who does not take the sample itself gets the last one at once (a loaded machine)


@contextmanager
def serving(tmp_path: Path, endpoints: Endpoints) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The real ``ikkai serve`` for environment ``dev`` on the stack; its process and base URL."""
    shutil.copytree(SHIPPED / "payments-ingest", tmp_path / "bundles" / "payments-ingest")
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({ENV: {"connect_url": endpoints.connect_url,
                                              "bootstrap_servers": endpoints.bootstrap_servers}}))  # fmt: skip
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("IKKAI_")} | {"IKKAI_SERVE_TOKEN": TOKEN}
    process = subprocess.Popen(
        [str(IKKAI), "serve", "--port", str(port), "--bundles-dir", str(tmp_path / "bundles"),
         "--clusters", str(clusters), "--health-interval", str(SAMPLE_SECONDS)],  # sampled in the background
        env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # written once the port is bound
        assert line.startswith("serving on http://"), line + process.stderr.read()
        threading.Thread(target=process.stderr.read, daemon=True).start()  # drained: librdkafka's lines
        yield process, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def sink_group(endpoints: Endpoints) -> str:
    """A ``connect-*`` group with committed offsets, so that every sample reads one group's offsets."""
    kafka = KafkaContext.recorded(endpoints)
    topic = f"restart-in-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka.client_config())  # kept until the future is done: a collected client ends it
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(kafka.producer_config())
    for _ in range(3):
        producer.produce(topic, value=b"x")
    producer.flush(30)
    group = f"{SINK_GROUP_PREFIX}restart-sink-{uuid.uuid4().hex[:10]}"
    consumer = Consumer(kafka.consumer_config(group))
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    return group.removeprefix(SINK_GROUP_PREFIX)


def lag_of(session: requests.Session, url: str, name: str) -> str | None:
    """The sink's lag section as the health view prints it; None while the lag is unreadable or not shown."""
    page = session.get(f"{url}/ui/env/{ENV}/health", timeout=120)
    assert page.status_code == 200, page.text[:300]
    shown = texts(page.text)
    if "health-error" in shown:  # the broker is not back yet, or the sample failed: nothing sampled to show
        return None
    assert shown["sampled"].startswith("This sample was taken "), shown["sampled"]  # its age, however it was got
    return shown.get(f"lag-sink-{name}")


def viewer_seconds(session: requests.Session, url: str) -> float:
    began = time.monotonic()
    page = session.get(f"{url}/ui/env/{ENV}/health", timeout=120)
    assert page.status_code == 200, page.text[:300]
    return time.monotonic() - began


def unanswered(session: requests.Session, url: str, stop: threading.Event) -> None:
    """Views until one shows that Kafka did not answer: a sample was taken after the broker stopped."""
    deadline = time.monotonic() + 6 * TIMEOUT_SECONDS
    while 'id="health-error"' not in session.get(f"{url}/ui/env/{ENV}/health", timeout=120).text:
        assert time.monotonic() < deadline, "the health view never showed that Kafka does not answer"
        stop.wait(1)  # the last sample, taken before the broker stopped, is shown meanwhile


def alive(process: subprocess.Popen[str], url: str) -> None:
    assert process.poll() is None, f"ikkai serve exited {process.returncode}"
    assert requests.get(f"{url}/healthz", timeout=30).status_code == 200


@pytest.mark.integration
def test_serve_outlives_broker_restarts_and_reads_lag_again(
    own_stack: tuple[LocalStack, Endpoints], tmp_path: Path
) -> None:
    local, endpoints = own_stack
    name = sink_group(endpoints)
    with serving(tmp_path, endpoints) as (process, url):
        session, _ = logged_in(url)
        # A new connection per view: the server closes an idle keep-alive connection after 5 s, the views come every
        # 5 s, and a request sent on a connection the server is closing gets no answer at all (a client race).
        session.headers["Connection"] = "close"
        assert lag_of(session, url, name) is not None  # read before any restart
        stop = threading.Event()

        def sample_in_a_loop() -> None:  # a viewer who keeps the page open, sampling through every restart
            looker, _ = logged_in(url)
            looker.headers["Connection"] = "close"
            while not stop.is_set() and process.poll() is None:
                try:
                    looker.get(f"{url}/ui/env/{ENV}/health", timeout=120)
                except requests.RequestException:
                    return
                stop.wait(0.5)

        loop = threading.Thread(target=sample_in_a_loop, daemon=True)
        loop.start()
        try:
            for restart in range(RESTARTS):
                local.kill("broker", signal.SIGSTOP)  # hung, not refusing: every request waits for its timeout
                unanswered(session, url, stop)
                with ThreadPoolExecutor(VIEWERS) as pool:  # four viewers at once while Kafka does not answer
                    waits = sorted(pool.map(lambda _: viewer_seconds(session, url), range(VIEWERS)))
                assert waits[-2] < QUICK_SECONDS, f"restart {restart}: viewers queued: {waits}"
                alive(process, url)
                local.kill("broker", signal.SIGKILL)
                local.start("broker")
                seen = None
                for _ in range(RECOVERY_SAMPLES):
                    seen = lag_of(session, url, name)
                    if seen is not None:
                        break
                    stop.wait(SAMPLE_SECONDS)  # the next view takes a new sample
                alive(process, url)
                assert seen is not None, f"restart {restart}: lag unreadable {RECOVERY_SAMPLES} samples after"
                assert " 3 2 1" in seen, seen  # end 3, committed 2, lag 1
        finally:
            stop.set()
            loop.join(2 * TIMEOUT_SECONDS + 30)
            local.kill("broker", signal.SIGCONT)  # a stopped broker goes on; a killed one is started again
            local.start("broker")
        alive(process, url)

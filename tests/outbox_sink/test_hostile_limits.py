"""The hostile matrix at the sink's limits: a hostile schema registry, and a deployment with many targets.

Both rows deploy the shipped ``outbox-sink`` bundle rendered for ``dev`` (``Deployment`` of the
matrix: only ``--set`` values and the connector's name are the test's) on the embedded stack's real
Connect worker, and read every outcome with read_committed consumers (issue 44, cases 3 and 4).

**The registry** (``HostileRegistry``: one scripted server is the target and the registry) answers
the schema ids of Confluent-framed requests with a body that stalls, one that trickles a byte a
quarter second, and one past the client's 1 MiB cap. What the sink does (``SchemaRegistryClient``,
``OutboxSinkTask``): a stalled or trickling answer ends at the registry deadline (10 s over headers
and body) as "the registry could not answer": the record is neither sent nor dead-lettered but
asked for again after a backoff, as long as it takes; an answer past the cap is refused, the record
dead-lettered ``unknown-schema`` with the reason. So, while the registry misbehaves: no read of it
is held past the deadline (the server times each answer it holds), the waiting records have no
receipt and no dead letter and are asked for again, the huge one is on the DLQ with a bounded
reason, and healthy records on another partition — one single-object, one whose id the registry
answers — are delivered. Once the registry answers, the waiting records are delivered, once each.

**Many targets**: the sink's allow-list holds ``IKKAI_POOL_TARGETS`` (1,000) aliases, each a port of
its own on loopback, and one request goes to each. The aliases are added to the rendered config as
the template adds a target (``with_targets``, checked against ``--set`` by
``test_more_targets_are_laid_out_as_the_template_lays_them_out``): the render checks that each
``--set`` is used by rendering without it, so a thousand of them cost a million renders, and a
mapping cannot be one ``--set``. While they are delivered, the Connect worker's open sockets
(psutil, on the pid listening on the worker's REST port) are sampled: they must stay under the
worker's own baseline plus the idle-connection cap (256 in the JVM) plus the requests the task may
have in flight. Without the cap, every connection stays 30 s, so any run that answers more than
the cap in 30 s shows it (the test prints how many it answered in its busiest 30 s).
"""

from __future__ import annotations

import bisect
import json
import os
import time
import uuid
from dataclasses import replace
from urllib.parse import urlsplit

import psutil
import pytest

from demo.receiver import ReferenceReceiver
from ikkai.contract.codec import default_codec
from ikkai.contract.outbox import REQUEST_SCHEMA
from ikkai.settings import Endpoints
from tests.outbox_sink.conftest import render_sink, with_targets
from tests.outbox_sink.hostile_behaviours import Behaviour
from tests.outbox_sink.hostile_deployment import PARTITIONS, WAIT, Deployment, check
from tests.outbox_sink.hostile_records import HOSTILE, V2_HEADER_LEN, Spec, Written, materialise
from tests.outbox_sink.hostile_registry import HostileRegistry
from tests.outbox_sink.hostile_server import HostileServer

pytestmark = pytest.mark.integration

REGISTRY_DEADLINE_S = 10.0  # OutboxSinkConfig.REGISTRY_TIMEOUT: over headers and body
REGISTRY_CAP = 1024 * 1024  # SchemaRegistryClient.MAX_ANSWER_BYTES
HELD = (Behaviour.STALL_BODY, Behaviour.DRIP)  # answers the deadline must end
LATE_S = 5.0  # how much later than its deadline a loaded machine may close a held answer
POOL_TARGETS = int(os.environ.get("IKKAI_POOL_TARGETS", "1000"))
IDLE_CONNECTIONS = 256  # HttpSender.IDLE_CONNECTIONS: idle connections kept in the worker's JVM, all clients
IN_FLIGHT = PARTITIONS * 8  # outbox.max.in.flight.requests (8, the bundle leaves the default) per partition
KAFKA_CHURN = 16  # the worker's own Kafka connections that come and go while it runs (metadata, coordinators)


# -- a hostile schema registry ---------------------------------------------------------------------


def confluent(written: Written, schema_id: int, *, decodable: bool = True) -> Written:
    """``written`` in the Confluent wire format (00, the schema id, the same Avro body); not decodable: no receipt."""
    assert written.value is not None
    value = b"\x00" + schema_id.to_bytes(4, "big") + written.value[V2_HEADER_LEN:]
    if not decodable:
        return replace(written, value=value, fields=None, idempotency_key=None)
    return replace(written, value=value)


def check_while_the_registry_misbehaves(
    deployment: Deployment, server: HostileRegistry, waiting: list[Written], huge: Written, healthy: list[Written]
) -> None:
    """What the sink must have done by the time the healthy records are in and each waiting one was asked twice."""
    now = time.monotonic()
    late = [h for h in server.holds() if h.behaviour in HELD and h.seconds(now) > REGISTRY_DEADLINE_S + LATE_S]
    assert not late, f"reads of the registry held past its {REGISTRY_DEADLINE_S:.0f} s deadline: " + ", ".join(
        f"id {h.schema_id} {h.behaviour.value} {h.seconds(now):.1f} s{'' if h.ended else ' (still open)'}" for h in late
    )
    observed = deployment.observed
    for w in healthy:
        outcomes = [r.outcome for r in observed.receipts.get(w.idempotency_key or "", [])]
        assert outcomes == ["DELIVERED"], (
            f"a healthy record on another partition (framing {(w.value or b'')[:1].hex()}) was not delivered while "
            f"the registry misbehaved: receipts {outcomes}"
        )
    for w in waiting:
        schema_id = int.from_bytes((w.value or b"")[1:5], "big")
        assert server.asked(schema_id) >= 2, f"schema id {schema_id}, not answered, was not asked for again"
        assert not observed.receipts.get(w.idempotency_key or ""), f"waiting for schema id {schema_id}, yet a receipt"
        assert not observed.dead_letters.get((w.spec.partition, w.offset)), f"waiting for {schema_id}, yet on the DLQ"
    [parked] = observed.dead_letters.get((huge.spec.partition, huge.offset), [])
    assert parked.get("ikkai.dlq.error_class") == "unknown-schema", parked
    reason = parked.get("ikkai.dlq.reason", "")
    assert f"the body was cut at {REGISTRY_CAP} bytes" in reason and len(reason.encode()) <= 1024, reason
    assert deployment.task_failure() is None


def test_a_hostile_schema_registry_holds_no_read_past_its_deadline(
    stack: Endpoints, receiver: ReferenceReceiver
) -> None:
    ids = {Behaviour.STALL_BODY: 4101, Behaviour.DRIP: 4102, Behaviour.HUGE: 4103, Behaviour.OK: 4104}
    schema = json.dumps(default_codec().catalog.get(REQUEST_SCHEMA).schema)
    run = uuid.uuid4().hex[:8]
    made = [materialise(Spec(partition=p), f"{run}r{n}") for n, p in enumerate([0, 1, 2, 2, 2])]
    waiting = [confluent(made[0], ids[Behaviour.STALL_BODY]), confluent(made[1], ids[Behaviour.DRIP])]
    huge = confluent(made[2], ids[Behaviour.HUGE], decodable=False)
    healthy = [made[3], confluent(made[4], ids[Behaviour.OK])]  # single-object, and an id the registry answers
    with HostileRegistry() as server:
        for behaviour, schema_id in ids.items():
            server.script(schema_id, behaviour, schema)
        deployment = Deployment(stack, receiver, server, sets=[f"schema_registry.url={server.registry_url}"])
        try:
            batch = deployment.produce([*waiting, huge, *healthy])
            deployment.wait([huge, *healthy])
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and any(server.asked(ids[b]) < 2 for b in HELD):
                deployment.read(0.5)
            check_while_the_registry_misbehaves(deployment, server, waiting, huge, healthy)
            for behaviour in HELD:  # the registry recovers
                server.script(ids[behaviour], Behaviour.OK, schema)
            deployment.wait(batch)
            check(deployment, batch)  # each waiting record DELIVERED once, applied once; the huge one: one dead letter
        finally:
            deployment.close()


# -- many targets ----------------------------------------------------------------------------------


def worker_process(connect_url: str) -> psutil.Process | None:
    """The process listening on the Connect worker's REST port on this machine; None when it is not here."""
    url = urlsplit(connect_url)
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == url.port and c.pid is not None:
            return psutil.Process(c.pid)
    return None


def test_many_targets_keep_the_worker_s_connections_bounded(stack: Endpoints, receiver: ReferenceReceiver) -> None:
    worker = worker_process(stack.connect_url)
    if worker is None:
        pytest.skip(f"counts the Connect worker's sockets: it needs the worker on this machine ({stack.connect_url})")
    with HostileServer() as server:
        urls = server.more_targets(POOL_TARGETS)
        ports = {urlsplit(u).port for u in urls}
        aliases = [f"many-{i:05d}" for i in range(POOL_TARGETS)]
        targets = dict(zip(aliases, urls, strict=True))  # too many for --set: added as the template adds them
        deployment = Deployment(stack, receiver, server, more_targets=targets)
        try:
            baseline = len(worker.net_connections(kind="inet"))
            batch = deployment.write([Spec(target=a, partition=i % PARTITIONS) for i, a in enumerate(aliases)])
            started = time.monotonic()
            peak, peak_to_targets = baseline, 0
            deadline = started + max(WAIT, POOL_TARGETS / 5)
            while not all(deployment.settled(w) for w in batch) and time.monotonic() < deadline:
                deployment.read(0.5)
                sockets = worker.net_connections(kind="inet")
                to_targets = sum(1 for s in sockets if s.raddr and s.raddr.port in ports)
                peak, peak_to_targets = max(peak, len(sockets)), max(peak_to_targets, to_targets)
            took = time.monotonic() - started
            deployment.read(1.0)
            check(deployment, batch)
            at = sorted(a.at for a in server.applications())
            busiest = max(bisect.bisect_left(at, start + 30) - i for i, start in enumerate(at))
            print(
                f"\n{POOL_TARGETS} targets delivered in {took:.0f} s; worker sockets: baseline {baseline}, "
                f"peak {peak}, peak to the targets {peak_to_targets}; most targets answered within 30 s: {busiest}"
            )
            bound = baseline + IDLE_CONNECTIONS + IN_FLIGHT + KAFKA_CHURN
            assert peak <= bound, (
                f"the Connect worker had {peak} sockets open at once ({peak_to_targets} to the targets) with "
                f"{POOL_TARGETS} targets: over its baseline {baseline} + {IDLE_CONNECTIONS} idle + {IN_FLIGHT} in "
                f"flight + {KAFKA_CHURN}"
            )
        finally:
            deployment.close()


def test_more_targets_are_laid_out_as_the_template_lays_them_out() -> None:
    """``with_targets`` (the many-targets row's config) gives the config that ``--set targets.<alias>.url`` renders."""
    topics = {"requests": "r", "receipts": "c", "dlq": "d"}
    urls = {f"many-{i:05d}": f"http://127.0.0.1:{20_000 + i}/api" for i in range(3)}
    sets = [f"targets.{HOSTILE}.url=http://127.0.0.1:1/api"]
    [by_set] = render_sink(
        "k:9092", "http://r", topics, [*sets, *(f"targets.{a}.url={u}" for a, u in urls.items())]
    ).connectors
    [added] = with_targets(render_sink("k:9092", "http://r", topics, sets), urls).connectors
    assert {**added.config, "name": ""} == {**by_set.config, "name": ""}

"""No record and no server can stop the outbox sink: a hostile matrix on the real Connect worker.

Batches of outbox records — well-formed ones with hostile field values (control characters,
CR LF, non-Latin-1 such as ``notify-客户``, 8 KB and 64 KB values, very long paths, ``..;``
segments, arbitrary traceparent bytes), values under the request schema's fingerprint with a
corrupt body (a length claiming 2 GB, a bad union index, a cut), arbitrary bytes — are written
in one transaction each with a plain transactional producer (the sink reads read_committed) to
the REAL outbox sink connector in the embedded stack's REAL Connect worker, which sends them to
a scripted server (``hostile_server.py``) that answers each path as the test asks: normally
(200, 201, 409 then 201, 303), or with headers and a stalled body, a dripping body, a huge body,
a 1xx and nothing, a reset after the headers, a garbage status line; and a TLS target whose
handshake never completes.

After each batch, read back with read_committed consumers and Connect's REST status:

* the connector's task is RUNNING;
* every decodable record has exactly one receipt (DELIVERED or DEAD_LETTERED), found by its
  Idempotency-Key; every DEAD_LETTERED one, and every undecodable record, exactly one entry on
  ``dlq.outbox`` (found by its source partition and offset); a DELIVERED one none;
* the server applied each effect at most once, and exactly once, with the record's key, for
  each DELIVERED; no request reached the server outside the target's base URL;
* where a record is well-formed and only the server misbehaves, the outcome the rules give:
  applied answers (2xx, 303) are DELIVERED, a misbehaviour on the first attempt only is retried
  and DELIVERED, one on every attempt is DEAD_LETTERED when the retry budget is spent.

The named cases (``test_every_server_behaviour``, ``test_named_hostile_records``) run every
behaviour and every sharp value once; ``test_generated_batches`` draws batches with hypothesis.
The connector is deployed once per test function, never per example. The default run is
bounded (a few batches, derandomized). A soak run draws more, from a seed, with a 300 MB body:

    IKKAI_HOSTILE_EXAMPLES=200 IKKAI_HOSTILE_SEED=12345 IKKAI_HOSTILE_HUGE_MB=300 \\
        .venv/bin/python -m pytest tests/outbox_sink/test_hostile_matrix.py -x -q
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from demo.receiver import ReferenceReceiver
from ikkai.settings import Endpoints
from tests.outbox_sink.hostile_behaviours import ALWAYS, Behaviour
from tests.outbox_sink.hostile_deployment import PARTITIONS, Deployment
from tests.outbox_sink.hostile_records import DNS, HOSTILE, TLS, Spec
from tests.outbox_sink.hostile_server import MAX_TARGET, HostileServer

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("IKKAI_HOSTILE_EXAMPLES", "4"))
SEED = os.environ.get("IKKAI_HOSTILE_SEED")
HUGE_BYTES = int(os.environ.get("IKKAI_HOSTILE_HUGE_MB", "64")) * 1024 * 1024


@dataclass
class Matrix:
    stack: Endpoints
    receiver: ReferenceReceiver
    server: HostileServer
    deployments: dict[str, Deployment] = field(default_factory=dict)

    def __repr__(self) -> str:  # hypothesis prints it with a failing example
        return f"Matrix({self.stack.connect_url}, server {self.server.url})"

    def deployment(self, name: str) -> Deployment:
        """The test's own sink, deployed on first use: a failure in one test leaves the others theirs."""
        if name not in self.deployments:
            self.deployments[name] = Deployment(self.stack, self.receiver, self.server)
        return self.deployments[name]


@pytest.fixture(scope="module")
def matrix(stack: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    home: Path = tmp_path_factory.mktemp("hostile")
    with ReferenceReceiver(home / "receiver.sqlite") as receiver, HostileServer(huge_bytes=HUGE_BYTES) as server:
        m = Matrix(stack, receiver, server)
        try:
            yield m
        finally:
            for deployment in m.deployments.values():
                deployment.close()
            m.deployments.clear()  # the producers go with them, before the stack stops


# -- the named cases ------------------------------------------------------------------------------

EVERY_BEHAVIOUR = [
    Spec(behaviour=b, times=times, partition=i % PARTITIONS)
    for i, (b, times) in enumerate((b, t) for b in Behaviour for t in (1, ALWAYS))
] + [Spec(target=TLS, partition=0)]

# Issue 44, each case on the shipped bundle's sink: (1) a ~400 KB alias, and a 300 KB request answered with a 390 KB
# status line, each dead-lettered with bounded reasons (the DLQ entry must be there); (2) a valid 2,048-byte path whose
# quoting overflowed the stack, answered 404; (5) is EVERY_BEHAVIOUR's stall-body, drip and huge; (6) an explicit
# effect equal to the default effect of the record before it, same decision: two keys, both applied; (8) encoded dot
# segments, and a target whose host does not resolve.
ISSUE_44 = [
    Spec(hostile=(("target", "t" * 400_000),), partition=0, expect_class="unknown-target"),
    Spec(behaviour=Behaviour.HUGE_GARBAGE, times=ALWAYS, body=b"x" * 300_000, partition=1,
         expect_class="retries-exhausted"),
    Spec(behaviour=Behaviour.NOT_FOUND, times=ALWAYS, path_tail="?next=https://", path_bytes=2048, partition=2,
         expect_class="rejected-by-target", expect_reason="returned 404"),
    Spec(behaviour=Behaviour.OK, partition=0),
    Spec(behaviour=Behaviour.OK, partition=0, effect_of_previous=True),
    Spec(path_tail="/.%252e/.%252e/.%252e/.%252e/.%252e/internal", partition=1, expect_class="bad-path"),
    Spec(path_tail="/..%3b/..%3b/..%3b/..%3b/..%3b/internal", partition=2, expect_class="bad-path"),
    Spec(path_tail="/..%00/..%00/..%00/..%00/..%00/internal", partition=0, expect_class="bad-path"),
    Spec(target=DNS, partition=1, expect_class="retries-exhausted", expect_reason="cannot resolve host"),
]  # fmt: skip

SHARP_VALUES: list[tuple[str, Any]] = [
    ("effect", "notify-客户"),
    ("effect", "hold\r\nX-Injected: yes"),
    ("decision_id", "d\x00"),
    ("key", "客户"),
    ("model_version", "fraud@\x7f1"),
    ("model_version", "模型"),
    ("content_type", "application/json; charset=\x01"),
    ("content_type", "text/plain; x=ü"),  # Latin-1: the HTTP layer carries it
    ("header_value", "v" * 8 * 1024),
    ("header_value", "ok\r\nX-Injected: yes"),
    ("header_value", "客户"),
    ("header_name", "X Bad"),
    ("header_name", "X-Ikkai-Effect"),
    ("method", "TRACE"),
    ("method", "pöst"),
    ("target", "attacker-api"),
    ("target", "客户"),
    ("traceparent", b"\xff\xfe not utf-8"),
    ("traceparent", "00-客户-01".encode()),
    ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX-Injected: yes"),
]
SHARP_PATHS: list[tuple[str | None, str]] = [
    (None, "/" + "a" * (MAX_TARGET + 10)),  # the server answers 414
    (None, "/" + "a" * 600_000),  # reason and default effect embed it: past 1 MB if nothing cuts them
    (None, "/..;/..;/..;/..;/..;/internal"),  # Tomcat resolves ..; as ..
    (None, "/%2e%2e;x/%2e%2e;x/%2e%2e;x/%2e%2e;x/%2e%2e;x/internal"),
    (None, "/a b"),
    (None, "/客户"),
    (None, "/x\r\nHost: evil"),
    ("ok/1/relative", ""),
    ("//evil.example/x", ""),
]
CORRUPTIONS = [
    ("length", "decision_id", 2**31 - 9),  # a 2 GB string
    ("length", "decision_id", 2**31 - 1),
    ("length", "body", 2**30),
    ("length", "path", 10**12),
    ("length", "key", -1),
    ("length", "header_value", 2**31 - 9),
    ("union", "method", 2),
    ("union", "effect", -1),
    ("union", "model_version", 2**31 - 1),
    ("map", "headers", 2**30),
    ("cut", "", 1),
    ("cut", "", 20),
]
RAW = [
    None,
    b"",
    b"\x00",
    b"\xc3\x01",
    b"\xc3\x01" + bytes(8) + b"body",
    b"\x00\x00\x00\x00\x07avro-ish",
    b'{"json": 1}',
]


def named_records() -> dict[str, list[Spec]]:
    """The sharp records by group; each group runs on its own sink, so one that kills a task hides no other."""
    with_header = (("header_value", "v"),)
    return {
        "field-values": [Spec(hostile=(v,), partition=i % PARTITIONS) for i, v in enumerate(SHARP_VALUES)],
        "paths": [Spec(path=p, path_tail=t, partition=i % PARTITIONS) for i, (p, t) in enumerate(SHARP_PATHS)],
        "raw-bytes": [Spec(kind="raw", raw=r, partition=i % PARTITIONS) for i, r in enumerate(RAW)],
        "corrupt-bodies": [
            Spec(
                kind="corrupt",
                corruption=c,
                partition=i % PARTITIONS,
                hostile=with_header if c[1].startswith("header") or c[0] == "map" else (),
            )
            for i, c in enumerate(CORRUPTIONS)
        ],
    }


def test_every_server_behaviour(matrix: Matrix) -> None:
    matrix.deployment("behaviours").run(EVERY_BEHAVIOUR)


def test_issue_44_cases(matrix: Matrix) -> None:
    matrix.deployment("issue-44").run([*ISSUE_44, Spec(behaviour=Behaviour.OK, partition=2)])


@pytest.mark.parametrize("group", list(named_records()))
def test_named_hostile_records(matrix: Matrix, group: str) -> None:
    # A well-formed request after the group: the partition goes on behind the hostile ones.
    matrix.deployment(f"records-{group}").run([*named_records()[group], Spec(behaviour=Behaviour.OK)])


# -- generated batches ------------------------------------------------------------------------------

CONTROL = st.sampled_from(["\x00", "\x01", "\t", "\n", "\r", "\r\n", "\x1b", "\x1f", "\x7f", "\x85"])
NON_LATIN1 = st.text(
    alphabet=st.characters(min_codepoint=0x100, max_codepoint=0x2FFFF, exclude_categories=["Cs"]),
    min_size=1,
    max_size=6,
)
TEXT = st.one_of(
    st.builds(lambda a, c, b: f"{a}{c}{b}", st.text("abc", max_size=3), CONTROL, st.text("xyz", max_size=3)),
    NON_LATIN1,
    st.just("notify-客户"),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0xFF), min_size=1, max_size=4),
    st.sampled_from([8 * 1024, 8 * 1024 + 1, 64 * 1024]).map(lambda n: "v" * n),
    st.just(""),
    st.text(max_size=12),
)
FIELDS = ["decision_id", "key", "effect", "model_version", "content_type", "header_value", "header_name", "method",
          "target"]  # fmt: skip
HOSTILE_FIELD = st.one_of(
    st.tuples(st.sampled_from(FIELDS), TEXT),
    st.tuples(st.just("traceparent"), st.one_of(st.binary(max_size=40), TEXT.map(lambda t: t.encode()))),
)
PATH_TAIL = st.one_of(
    st.sampled_from(
        ["/..;", "/..;/..;/..;/..;/..;/x", "/a b", "/#f", "/\\", "/%2e%2e;/%2e%2e;/%2e%2e;/%2e%2e;/%2e%2e;"]
    ),
    st.sampled_from([MAX_TARGET + 1, 200_000, 600_000]).map(lambda n: "/" + "p" * n),
    TEXT.map(lambda t: "/" + t),
)
REQUEST = st.builds(
    Spec,
    partition=st.integers(0, PARTITIONS - 1),
    behaviour=st.sampled_from(list(Behaviour)),
    times=st.sampled_from([1, ALWAYS]),
    target=st.sampled_from([HOSTILE, HOSTILE, HOSTILE, TLS]),
    hostile=st.lists(HOSTILE_FIELD, max_size=2, unique_by=lambda f: f[0]).map(tuple),
    path_tail=st.one_of(st.just(""), st.just(""), PATH_TAIL),
    body=st.one_of(st.just(b"{}"), st.binary(max_size=64)),
)
CORRUPT = st.builds(
    lambda c, p: Spec(kind="corrupt", corruption=c, partition=p, hostile=(("header_value", "v"),)),
    st.one_of(
        st.tuples(st.sampled_from(["length"]), st.sampled_from(["decision_id", "key", "path", "body", "header_value"]),
                  st.one_of(st.integers(2**20, 2**62), st.integers(-(2**62), -1))),
        st.tuples(st.just("union"), st.sampled_from(["method", "model_version", "effect"]),
                  st.one_of(st.integers(2, 2**31), st.integers(-(2**31), -1))),
        st.tuples(st.just("map"), st.just("headers"), st.integers(2, 2**31)),
        st.tuples(st.just("cut"), st.just(""), st.integers(1, 40)),
    ),
    st.integers(0, PARTITIONS - 1),
)  # fmt: skip
RAW_BYTES = st.builds(
    lambda raw, p: Spec(kind="raw", raw=raw, partition=p),
    st.one_of(st.none(), st.binary(max_size=300), st.binary(max_size=40).map(lambda b: b"\xc3\x01" + b)),
    st.integers(0, PARTITIONS - 1),
)
BATCH = st.lists(st.one_of(REQUEST, REQUEST, REQUEST, CORRUPT, RAW_BYTES), min_size=3, max_size=10)


def _settings() -> Any:
    configured = settings(
        max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: one example costs seconds of a real worker
        suppress_health_check=list(HealthCheck), print_blob=True,
    )  # fmt: skip
    return (lambda f: seed(int(SEED))(configured(f))) if SEED is not None else configured


@_settings()
@given(batch=BATCH)
def test_generated_batches(matrix: Matrix, batch: list[Spec]) -> None:
    matrix.deployment("generated").run(batch)

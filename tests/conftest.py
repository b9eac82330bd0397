"""Fixtures shared by every test area, and the rule that CI never skips integration tests silently.

The ``stack`` fixture starts the embedded stack once per session, in a temporary home, with
the jars ``ikkai setup`` resolved; or, when IKKAI_BOOTSTRAP_SERVERS and IKKAI_CONNECT_URL are
set, uses that cluster and starts nothing. Tests that need only pure code never touch it.
Tests that kill a component (the Connect worker) share a second embedded stack, ``killable_stack``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import settings

from ikkai.contract.kafka import KafkaContext
from ikkai.errors import IkkaiError
from ikkai.settings import Endpoints, external_endpoints, jars_dir
from stack.local_stack import LocalStack
from stack.runtime import ExternalStack

# Hypothesis's per-example deadline is a timed assertion: on a loaded 2-core machine a pure example can take
# longer than 200 ms and fail a test that is right. Speed is the benchmarks' business, never a test's.
settings.register_profile("ikkai", deadline=None)
settings.load_profile("ikkai")

_skipped_integration: list[str] = []


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a `timeout`, a CI's cancel) stops the run as Ctrl-C does: the session's fixtures are torn down, so
    the embedded stacks they started are stopped. Python's default for SIGTERM ended the process at once and left
    each stack's broker and Connect worker running."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupted)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    external = external_endpoints()
    if external is not None:
        yield ExternalStack(external).up()
        return
    local = LocalStack(tmp_path_factory.mktemp("stack"), jars_dir(), progress=sys.stderr)
    try:
        endpoints = local.up()
    except IkkaiError as exc:
        local.down()
        pytest.skip(f"the embedded stack cannot start here: {exc}")
    try:
        yield endpoints
    finally:
        local.down()


@pytest.fixture(scope="session")
def killable_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Endpoints]]:
    """A second embedded stack for the tests that kill its components: never the shared ``stack``, whose other
    tests would break with it. One for the session, not one per module (a start is 20-60 s): a test that kills a
    component starts it again before it ends, and each user removes its connectors (``connectors_removed``)."""
    if external_endpoints() is not None:
        pytest.skip("kills a Connect worker, so it needs an embedded stack of its own (unset IKKAI_*_URL/SERVERS)")
    local = LocalStack(tmp_path_factory.mktemp("killable") / "home", jars_dir(), progress=sys.stderr)
    try:
        yield local, local.up()
    finally:
        local.down()


def connectors_removed(connect_url: str) -> None:
    """Delete every connector of a Connect cluster (what a user of ``killable_stack`` leaves for the next)."""
    from deploy.connect_rest import ConnectClient

    client = ConnectClient(connect_url)
    for name in client.connectors():
        client.delete_connector(name)


@pytest.fixture(scope="session")
def bootstrap(stack: Endpoints) -> str:
    return stack.bootstrap_servers


@pytest.fixture(scope="session")
def cluster(stack: Endpoints) -> KafkaContext:
    """The stack's Kafka cluster as every client reaches it, resolved once for the session from the stack's record."""
    return KafkaContext.recorded(stack)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules marked ``heavy`` (several minutes each) run first: with two workers (``make test``, pytest-xdist
    with ``--dist loadfile``) the long modules then overlap each other and the short ones fill the end, instead of
    one long module starting last and running alone. The sort is stable: order inside a module never changes."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("heavy") else 1)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "integration" in report.keywords and "soak" not in report.keywords:
        _skipped_integration.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if in_ci() and _skipped_integration and exitstatus == 0:
        listing = "\n  ".join(_skipped_integration[:20])
        sys.stderr.write(f"\nCI must run every integration test; these were skipped:\n  {listing}\n")
        session.exitstatus = 1


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for the whole run (local[2], UI off, few shuffle partitions)."""
    from spark_jobs.session import spark_session

    try:
        session = spark_session("ikkai-tests", conf={"spark.sql.shuffle.partitions": "2"})
    except IkkaiError as exc:
        pytest.skip(f"Spark cannot start here: {exc}")
    try:
        yield session
    finally:
        session.stop()

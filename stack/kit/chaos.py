"""The chaos kit: which broker or executor to kill, and when the cluster has healed, for the demo, benchmarks and tests.

Broker-failure runs kill a broker on purpose: the one leading a job's output partition, or the one
coordinating a writer's transactions, then wait until every partition is back in sync before the
next kill. ``ChaosStack`` is a ``LocalStack`` with those queries (stack/kit/leaders.py asks the brokers);
``kill`` and ``start`` are the stack's own. On a stack with a Spark standalone cluster, executor
kills aim at the JVMs the workers launched for an application (``executor_jvms``, ``executors_of``:
the master's ``/json/`` names each running application's id, each executor's command line its
``--app-id``). Only the demo, benchmarks and tests import this module: ``ikkai stack``, the runtimes
and the control plane never do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import psutil
import requests

from stack.errors import StackError
from stack.kit.leaders import partition_leaders, transaction_coordinator, under_replicated
from stack.local_stack import LocalStack
from stack.processes import stack_processes
from stack.spark_cluster import SPARK_MASTER, master_ui_url, spark_worker_components

# On an executor JVM's command line (CoarseGrainedExecutorBackend): which executor, of which application.
EXECUTOR_ID = "--executor-id"
APP_ID = "--app-id"


def executor_jvms(stack: LocalStack) -> list[psutil.Process]:
    """Every executor JVM the stack's Spark workers launched and that still runs, of any application."""
    workers = [pid for name in spark_worker_components(stack.spark_worker_count)
               for pid in stack_processes(stack.home).get(name, [])]  # fmt: skip
    found = []
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):  # a worker or an executor that ends while we look
            for child in psutil.Process(worker).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if child.status() != psutil.STATUS_ZOMBIE and EXECUTOR_ID in child.cmdline():
                        found.append(child)
    return found


def command_option(args: Sequence[str], name: str) -> str | None:
    """The value after ``name`` on a command line (``--app-id app-…``), or None."""
    return args[args.index(name) + 1] if name in args[:-1] else None


def active_application_ids(master_state: Any, name: str) -> list[str]:
    """The ids of the applications called ``name`` among those the master's ``/json/`` lists as active."""
    apps = master_state.get("activeapps") if isinstance(master_state, dict) else None
    return [str(app["id"]) for app in apps or [] if isinstance(app, dict) and app.get("name") == name and "id" in app]


class ChaosStack(LocalStack):
    """An embedded stack that also names the broker that matters now and waits until the cluster healed."""

    def broker_of(self, node_id: int) -> str:
        """The component name of the broker with ``node.id`` ``node_id``."""
        if not 1 <= node_id <= self.broker_count:
            raise StackError(f"node {node_id}", f"no such broker in {self.home} (node ids 1..{self.broker_count})")
        return self.brokers[node_id - 1]

    def leader_of(self, topic: str, partition: int) -> str:
        """The broker leading ``topic``/``partition`` now (chaos tests kill it)."""
        leader = partition_leaders(self.kafka_cluster(), topic).get(partition, -1)
        if leader < 0:
            raise StackError(f"{topic}/{partition}", "has no leader now", fix="wait until a broker leads it")
        return self.broker_of(leader)

    def coordinator_of(self, transactional_id: str) -> str:
        """The broker coordinating ``transactional_id``'s transactions now (the leader of its
        ``__transaction_state`` partition, which exists once a transactional producer has started)."""
        coordinator = transaction_coordinator(self.kafka_cluster(), transactional_id)
        if coordinator < 0:
            raise StackError(transactional_id, "has no transaction coordinator now", fix="wait until a broker leads it")
        return self.broker_of(coordinator)

    def wait_in_sync(self, timeout: float = 120) -> None:
        """Wait until every partition has a leader and all its replicas in sync (after a broker restart)."""
        deadline = time.monotonic() + timeout
        lagging = under_replicated(self.kafka_cluster())
        while lagging:
            if time.monotonic() > deadline:
                shown = ", ".join(lagging[:5]) + (f" and {len(lagging) - 5} more" if len(lagging) > 5 else "")
                raise StackError("cluster", f"{shown} still under-replicated after {timeout:.0f}s",
                                 fix="check that every broker runs (`ikkai stack status`) and their logs")  # fmt: skip
            time.sleep(0.5)
            lagging = under_replicated(self.kafka_cluster())

    def executors_of(self, application: str) -> list[psutil.Process]:
        """The executor JVMs that run now for the active Spark application called ``application``
        (``ikkai-infer``); none while it waits for a core."""
        if self.spark_master_url() is None:
            raise StackError(SPARK_MASTER, f"no Spark cluster was started in {self.home}",
                             fix="start the stack with --spark-workers 2")  # fmt: skip
        master_ui = master_ui_url(self._home.saved_cluster_ports())
        try:
            state = requests.get(f"{master_ui}/json/", timeout=5).json()
        except (requests.RequestException, ValueError) as exc:
            raise StackError(SPARK_MASTER, f"{master_ui}/json/ did not answer: {exc}", log=self.log_file(SPARK_MASTER),
                             fix="check that it runs: `ikkai stack status`") from exc  # fmt: skip
        ids = set(active_application_ids(state, application))
        mine = []
        for executor in executor_jvms(self):
            with contextlib.suppress(psutil.NoSuchProcess):
                if command_option(executor.cmdline(), APP_ID) in ids:
                    mine.append(executor)
        return mine

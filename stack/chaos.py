"""The chaos kit: which broker to kill, and when the cluster has healed, for the demo, benchmarks and tests.

Broker-failure runs kill a broker on purpose: the one leading a job's output partition, or the one
coordinating a writer's transactions, then wait until every partition is back in sync before the
next kill. ``ChaosStack`` is a ``LocalStack`` with those queries (stack/leaders.py asks the brokers);
``kill`` and ``start`` are the stack's own. Only the demo, benchmarks and tests import this module:
``ikkai stack``, the runtimes and the control plane never do.
"""

from __future__ import annotations

import time

from stack.errors import StackError
from stack.leaders import partition_leaders, transaction_coordinator, under_replicated
from stack.local_stack import LocalStack


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

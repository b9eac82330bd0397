"""What ``ikkai serve`` counts, and ``/metrics`` rendered from it by ``prometheus_client``.

``Metrics`` is plain data the routes and the reconcile loop update through its methods (each takes its one
lock), and the page reads the restart counts through ``restart_counts``; ``render`` hands
it to prometheus_client as a custom collector on a registry of its own (never the process-wide
default one, so that two control planes in one process never share a counter), and prometheus_client
writes the exposition format: escaping, types, help lines and its content type.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass
class Metrics:
    """Counters and gauges of one control plane."""

    requests: Counter[tuple[str, int]] = field(default_factory=Counter)
    applies: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    restarts: Counter[str] = field(default_factory=Counter)
    restarts_exhausted: dict[str, bool] = field(default_factory=dict)  # FAILED after max restarts: a person's turn
    connector_states: dict[tuple[str, str, str], str] = field(default_factory=dict)
    reconcile_runs: int = 0
    reconcile_failures: Counter[str] = field(default_factory=Counter)  # by exception class
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count_request(self, route: str, status: int) -> None:
        with self.lock:
            self.requests[(route, status)] += 1

    def count_apply(self, bundle: str, env: str, result: str) -> None:
        with self.lock:
            self.applies[(bundle, env, result)] += 1

    def count_reconcile_run(self) -> None:
        with self.lock:
            self.reconcile_runs += 1

    def count_reconcile_failure(self, kind: str) -> None:
        with self.lock:
            self.reconcile_failures[kind] += 1

    def saw_connector(self, bundle: str, env: str, connector: str, state: str) -> None:
        with self.lock:
            self.connector_states[(bundle, env, connector)] = state

    def count_restart(self, connector: str) -> None:
        with self.lock:
            self.restarts[connector] += 1

    def note_exhausted(self, connector: str, *, exhausted: bool) -> None:
        """Note whether ``connector`` is FAILED after max restarts (left for a person)."""
        with self.lock:
            self.restarts_exhausted[connector] = exhausted

    def restart_counts(self) -> dict[str, int]:
        """A copy of the automatic restarts per connector."""
        with self.lock:
            return dict(self.restarts)

    def render(self) -> str:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return generate_latest(registry).decode()


class _Collector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        with m.lock:
            requests = CounterMetricFamily("ikkai_http_requests", "HTTP responses by route and status code.",
                                           labels=["route", "code"])  # fmt: skip
            for (route, code), n in sorted(m.requests.items()):
                requests.add_metric([route, str(code)], n)
            applies = CounterMetricFamily("ikkai_bundle_applies", "Bundle applies by result.",
                                          labels=["bundle", "env", "result"])  # fmt: skip
            for labels, n in sorted(m.applies.items()):
                applies.add_metric(list(labels), n)
            restarts = CounterMetricFamily("ikkai_connector_auto_restarts", "Automatic restarts of failed connectors.",
                                           labels=["connector"])  # fmt: skip
            for connector, n in sorted(m.restarts.items()):
                restarts.add_metric([connector], n)
            exhausted = GaugeMetricFamily("ikkai_connector_auto_restart_exhausted",
                                          "1 while a connector is FAILED after max restarts: a person's turn.",
                                          labels=["connector"])  # fmt: skip
            for connector, value in sorted(m.restarts_exhausted.items()):
                exhausted.add_metric([connector], int(value))
            states = GaugeMetricFamily("ikkai_connector_state", "1 for each connector's last seen state.",
                                       labels=["bundle", "env", "connector", "state"])  # fmt: skip
            for (bundle, env, connector), state in sorted(m.connector_states.items()):
                states.add_metric([bundle, env, connector, state], 1)
            runs = CounterMetricFamily("ikkai_reconcile_runs", "Passes of the reconcile loop.", value=m.reconcile_runs)
            failures = CounterMetricFamily("ikkai_reconcile_failures", "Failed reconcile steps by exception class.",
                                           labels=["kind"])  # fmt: skip
            for kind, n in sorted(m.reconcile_failures.items()):
                failures.add_metric([kind], n)
        yield from (requests, applies, restarts, exhausted, states, runs, failures)

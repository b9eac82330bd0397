"""What ``ikkai serve`` counts, and ``/metrics`` rendered from it by ``prometheus_client``.

``Metrics`` is plain data the routes, the reconcile loop and the health sampler update through its methods (each
takes its one lock), and the page reads the restart counts through ``restart_counts``. The exactly-once numbers of
each environment's last health sample (``deploy.eos_view.health``) are kept as ``EosNumbers``, made by the pure
``eos_numbers``: a part of the sample that could not be read or judged exports no numbers, only its
``ikkai_eos_health_problem`` gauge at 1. ``render`` hands
it to prometheus_client as a custom collector on a registry of its own (never the process-wide
default one, so that two control planes in one process never share a counter), and prometheus_client
writes the exposition format: escaping, types, help lines and its content type.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from deploy.eos_view.health import Health

CONTENT_TYPE = CONTENT_TYPE_LATEST
PARTS = ("markers", "lag", "dead_letters", "reconciliation", "event_decisions")  # a health sample's parts

Query = tuple[str, str]  # (app, query)


@dataclass(frozen=True)
class QueryNumbers:
    transactions_open: int = 0  # output partitions with a transaction open
    open_seconds: float = 0.0  # the longest open one, as of the sample
    transactions_stuck: int = 0
    last_commit_age_seconds: float | None = None  # the newest marker's age; None: no marker yet


@dataclass(frozen=True)
class EosNumbers:
    """One environment's exactly-once numbers from its last health sample; None where a part was not judged."""

    at: float | None  # the sample's time; None: the sample failed (``problems["markers"]`` says so)
    problems: Mapping[str, bool]  # part → it could not be read or judged
    queries: Mapping[Query, QueryNumbers] = field(default_factory=dict)
    lags: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (kind, consumer) → records to read
    events: Mapping[str, int] | None = None  # events_without_decision, ..._decided_twice, ..._judged, ..._in_flight
    outbox: Mapping[str, int] | None = None  # effects_repeated, idempotency_keys_shared, requests_without_receipt, ...


def eos_numbers(health: Health | None) -> EosNumbers:
    """The numbers ``/metrics`` exports of a sample (None: the sample failed, nothing was read). Pure."""
    if health is None:
        return EosNumbers(None, {part: part == "markers" for part in PARTS})
    queries = {}
    for name, rows in health.queries.items():
        opened = [health.at - p.open_transaction.since for p in rows if p.open_transaction is not None]
        ages = [age for p in rows if (age := p.age_seconds(health.at)) is not None]
        queries[name] = QueryNumbers(len(opened), max(opened, default=0.0), sum(p.stuck for p in rows),
                                     min(ages, default=None))  # fmt: skip
    lags: dict[tuple[str, str], int | None] = {(g.kind, g.name): g.total for g in (*health.lags.queries,
                                                                                  *health.lags.sinks)}  # fmt: skip
    decided, outbox = health.event_decisions, health.reconciliation
    problems = {
        # a partition with records and no marker shown, or not read to its end ("no marker yet" is no problem)
        "markers": any(p.problem is not None and p.ends.committed > p.ends.earliest for p in health.partitions),
        "lag": health.lags.problem is not None, "dead_letters": health.dead_letters.problem is not None,
        "reconciliation": outbox.problem is not None, "event_decisions": decided.problem is not None,
    }  # fmt: skip
    events = None if decided.problem else {
        "events_without_decision": len(decided.without), "events_decided_twice": len(decided.twice),
        "events_judged": decided.judged, "events_in_flight": decided.in_flight,
    }  # fmt: skip
    effects = None if outbox.problem else {
        "effects_repeated": len(outbox.repeated), "idempotency_keys_shared": len(outbox.shared_keys),
        "requests_without_receipt": len(outbox.missing), "requests_judged": outbox.judged,
    }  # fmt: skip
    known = {name: total for name, total in lags.items() if total is not None}
    return EosNumbers(health.at, problems, queries, known, events, effects)


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
    eos: dict[str, EosNumbers] = field(default_factory=dict)  # environment → its last health sample's numbers
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw_health(self, env: str, health: Health | None) -> None:
        """Keep ``env``'s exactly-once numbers from its last health sample (None: it failed)."""
        numbers = eos_numbers(health)
        with self.lock:
            self.eos[env] = numbers

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
            eos = dict(m.eos)
        yield from (requests, applies, restarts, exhausted, states, runs, failures)
        yield from _eos_metrics(eos)


_EOS_HELP = {
    "events_without_decision": "Committed events of the decisions query with no decision and no dead letter.",
    "events_decided_twice": "Events two decisions name: the exactly-once promise broken.",
    "events_judged": "Events the last health sample judged (below the query's committed frontier).",
    "events_in_flight": "Events at or beyond the query's committed frontier, not judged.",
    "effects_repeated": "Outbox effects DELIVERED under more than one Idempotency-Key: applied more than once.",
    "idempotency_keys_shared": "Idempotency-Keys receipted for more than one effect: one of them never applied.",
    "requests_without_receipt": "Outbox requests older than the grace period without a final receipt.",
    "requests_judged": "Outbox requests the last health sample judged.",
}


def _eos_metrics(eos: Mapping[str, EosNumbers]) -> Iterator[Metric]:
    """The exactly-once gauges, labelled by environment (and query or consumer), from each last sample."""
    at = GaugeMetricFamily("ikkai_eos_health_sample_timestamp_seconds",
                           "When the last readable health sample was taken (Unix time).", labels=["env"])  # fmt: skip
    problem = GaugeMetricFamily("ikkai_eos_health_problem",
                                "1 while a part of the last health sample could not be read or judged (the page "
                                "says why); its numbers are then not exported.", labels=["env", "part"])  # fmt: skip
    counts = {name: GaugeMetricFamily(f"ikkai_eos_{name}", text, labels=["env"]) for name, text in _EOS_HELP.items()}
    query = ["env", "app", "query"]
    opened = GaugeMetricFamily("ikkai_eos_transactions_open", "Partitions with a transaction open.", labels=query)
    open_seconds = GaugeMetricFamily("ikkai_eos_transaction_open_seconds",
                                     "How long the longest open transaction has been open, as of the sample "
                                     "(counted from the first sample that saw it); 0: none.", labels=query)  # fmt: skip
    stuck = GaugeMetricFamily("ikkai_eos_transactions_stuck",
                              "Output partitions whose transaction stayed open over samples for the stuck time.",
                              labels=query)  # fmt: skip
    age = GaugeMetricFamily("ikkai_eos_last_commit_age_seconds",
                            "Age of the query's newest commit marker, as of the sample.", labels=query)  # fmt: skip
    lag = GaugeMetricFamily("ikkai_eos_consumer_lag", "Records a query or sink connector has left to read.",
                            labels=["env", "kind", "consumer"])  # fmt: skip
    for env, numbers in sorted(eos.items()):
        if numbers.at is not None:
            at.add_metric([env], numbers.at)
        for part in PARTS:
            problem.add_metric([env, part], int(numbers.problems.get(part, False)))
        for name, value in {**(numbers.events or {}), **(numbers.outbox or {})}.items():
            counts[name].add_metric([env], value)
        for (app, name), q in sorted(numbers.queries.items()):
            opened.add_metric([env, app, name], q.transactions_open)
            open_seconds.add_metric([env, app, name], round(q.open_seconds, 3))
            stuck.add_metric([env, app, name], q.transactions_stuck)
            if q.last_commit_age_seconds is not None:
                age.add_metric([env, app, name], round(q.last_commit_age_seconds, 3))
        for (kind, consumer), records in sorted(numbers.lags.items()):
            lag.add_metric([env, kind, consumer], records)
    yield from (at, problem, *counts.values(), opened, open_seconds, stuck, age, lag)

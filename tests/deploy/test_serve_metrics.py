"""``/metrics`` as prometheus_client writes it: parseable, escaped, the names ``ikkai serve`` always had, and the
exactly-once numbers of each environment's last health sample (the sampler itself, on the real stack, is in
test_page_health.py)."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from deploy.eos_view.consumer_lag import ConsumerLag, Lags, PartitionLag
from deploy.eos_view.event_decisions import EventDecisions
from deploy.eos_view.health import Ends, OpenTransaction, PartitionHealth, health_of
from deploy.eos_view.reconciliation import Reconciliation, RequestSeen
from deploy.serve.metrics import PARTS, Metrics

COMMITS = "_ikkai.commits.ikkai.infer"


def samples_of(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render())
        for sample in family.samples
    }


def test_label_values_round_trip_through_the_exposition_format() -> None:
    metrics = Metrics()
    odd = 'pay"ments\\in\ngest'  # a quote, a backslash and a newline: each must be escaped
    metrics.connector_states[("payments-ingest", "prod", odd)] = "FAILED"
    metrics.restarts[odd] += 2
    metrics.requests[("/bundles", 401)] += 4
    metrics.reconcile_runs = 3
    metrics.reconcile_failures["JSONDecodeError"] += 1
    samples = samples_of(metrics)
    state = ("ikkai_connector_state", (("bundle", "payments-ingest"), ("connector", odd), ("env", "prod"),
                                       ("state", "FAILED")))  # fmt: skip
    assert samples[state] == 1
    assert samples[("ikkai_connector_auto_restarts_total", (("connector", odd),))] == 2
    assert samples[("ikkai_http_requests_total", (("code", "401"), ("route", "/bundles")))] == 4
    assert samples[("ikkai_reconcile_runs_total", ())] == 3
    assert samples[("ikkai_reconcile_failures_total", (("kind", "JSONDecodeError"),))] == 1


def test_every_family_is_typed_even_before_anything_was_counted() -> None:
    families = {family.name: family.type for family in text_string_to_metric_families(Metrics().render())}
    assert families == {
        "ikkai_http_requests": "counter",
        "ikkai_bundle_applies": "counter",
        "ikkai_connector_auto_restarts": "counter",
        "ikkai_connector_auto_restart_exhausted": "gauge",
        "ikkai_connector_state": "gauge",
        "ikkai_reconcile_runs": "counter",
        "ikkai_reconcile_failures": "counter",
        **{
            f"ikkai_eos_{name}": "gauge"
            for name in (
                "health_sample_timestamp_seconds",
                "health_problem",
                "events_without_decision",
                "events_decided_twice",
                "events_judged",
                "events_in_flight",
                "effects_repeated",
                "idempotency_keys_shared",
                "requests_without_receipt",
                "requests_judged",
                "transactions_open",
                "transaction_open_seconds",
                "transactions_stuck",
                "last_commit_age_seconds",
                "consumer_lag",
            )
        },
    }


def test_every_exactly_once_number_of_a_sample_is_a_gauge_by_environment() -> None:
    at = 1_000.0
    rows = (
        PartitionHealth(COMMITS, "ikkai", "infer", 0, Ends(0, 6, 6), marker_ms=int(at * 1000) - 4_000),
        PartitionHealth(COMMITS, "ikkai", "infer", 1, Ends(0, 2, 3),
                        open_transaction=OpenTransaction(2, at - 90, 5), stuck=True),
    )  # fmt: skip
    request = RequestSeen("d" * 64, "hold", "payments-api", 0, ("outbox.requests", 0, 3))
    health = replace(
        health_of(at, {}, {}, {}, {}), partitions=rows, queries={("ikkai", "infer"): rows},
        lags=Lags((ConsumerLag("query", "ikkai.infer", (PartitionLag("events.payments", 0, 9, 8, 0),
                                                         PartitionLag("events.payments", 1, 30, 20))),),
                  (ConsumerLag("sink", "outbox-sink", (PartitionLag("outbox.requests", 0, 12, 12),)),)),
        reconciliation=Reconciliation(repeated=(("d" * 64, "hold"),), shared_keys=("k",), judged=7, missing=(request,)),
        event_decisions=EventDecisions(judged=40, in_flight=3, without=((1, 17),), twice=((0, 4), (0, 5))),
    )  # fmt: skip
    metrics = Metrics()
    metrics.saw_health("prod", health)
    metrics.saw_health("dev", None)  # a sample that failed: only its problem is said
    samples = samples_of(metrics)
    prod, query = (("env", "prod"),), (("app", "ikkai"), ("env", "prod"), ("query", "infer"))
    expected = {
        "ikkai_eos_events_without_decision": 1, "ikkai_eos_events_decided_twice": 2, "ikkai_eos_events_judged": 40,
        "ikkai_eos_events_in_flight": 3, "ikkai_eos_effects_repeated": 1, "ikkai_eos_idempotency_keys_shared": 1,
        "ikkai_eos_requests_without_receipt": 1, "ikkai_eos_requests_judged": 7,
        "ikkai_eos_health_sample_timestamp_seconds": at,
    }  # fmt: skip
    assert {name: samples[(name, prod)] for name in expected} == expected
    assert samples[("ikkai_eos_transactions_open", query)] == 1
    assert samples[("ikkai_eos_transaction_open_seconds", query)] == 90
    assert samples[("ikkai_eos_transactions_stuck", query)] == 1
    assert samples[("ikkai_eos_last_commit_age_seconds", query)] == 4
    lag = (("consumer", "ikkai.infer"), ("env", "prod"), ("kind", "query"))
    assert samples[("ikkai_eos_consumer_lag", lag)] == 10  # a caught-up partition adds nothing
    assert samples[("ikkai_eos_consumer_lag", (("consumer", "outbox-sink"), ("env", "prod"), ("kind", "sink")))] == 0
    assert all(samples[("ikkai_eos_health_problem", (("env", "prod"), ("part", part)))] == 0 for part in PARTS)
    dev = {(name, labels) for name, labels in samples if ("env", "dev") in labels}
    assert dev == {("ikkai_eos_health_problem", (("env", "dev"), ("part", part))) for part in PARTS}
    assert samples[("ikkai_eos_health_problem", (("env", "dev"), ("part", "markers")))] == 1

"""``/metrics`` as prometheus_client writes it: parseable, escaped, the names ``ikkai serve`` always had."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from deploy.serve.metrics import Metrics


def test_label_values_round_trip_through_the_exposition_format() -> None:
    metrics = Metrics()
    odd = 'pay"ments\\in\ngest'  # a quote, a backslash and a newline: each must be escaped
    metrics.connector_states[("payments-ingest", "prod", odd)] = "FAILED"
    metrics.restarts[odd] += 2
    metrics.requests[("/bundles", 401)] += 4
    metrics.reconcile_runs = 3
    metrics.reconcile_failures["JSONDecodeError"] += 1
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render())
        for sample in family.samples
    }
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
    }

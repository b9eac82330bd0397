"""A Connect trace or validation message quoting a URL with a credential is printed redacted, in text and
in ``-o json``: it is redacted where it enters ikkai's data (``ikkai connect describe``, ``ikkai bundle
status``, a failed apply, a rejected plan). The data is built from Connect's answers as they come."""

from __future__ import annotations

from typing import Any

import pytest

from cli.output import emit
from connectors.render import load_bundle, render_bundle
from connectors.secrets import REDACTED
from deploy.bundle_output import status_text
from deploy.connect_ops import describe_view
from deploy.connect_output import describe_text
from deploy.reconcile import ApplyFailed, LiveConnector, status_rows, validation_errors
from tests.connectors.conftest import SHIPPED

SECRET = "s3cr3t-in-a-url"  # noqa: S105 - a made-up credential the test looks for
URL = f"jdbc:postgresql://db:5432/payments?user=ikkai&password={SECRET}"
TRACE = (
    f"org.apache.kafka.connect.errors.ConnectException: cannot connect to {URL}\n"
    "\tat io.example.Task.start(Task.java:42)\n"
    f"Caused by: org.postgresql.util.PSQLException: FATAL: password authentication failed for {URL}"
)


def printed(data: dict[str, Any], output: str, text: Any, capsys: pytest.CaptureFixture[str]) -> str:
    emit(data, output, text)
    return capsys.readouterr().out


@pytest.mark.parametrize("output", ["text", "json"])
def test_connect_describe_prints_a_trace_without_the_url_credential(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = {
        "connector": {"state": "FAILED", "worker_id": "w1:8083", "trace": TRACE},
        "tasks": [{"id": 0, "state": "FAILED", "worker_id": "w1:8083", "trace": TRACE}],
        "type": "sink",
    }
    info = {"type": "sink", "config": {"connector.class": "io.example.JdbcSink", "topics": "payments"}}
    data = describe_view("jdbc-sink", status, info, frozenset(), ["payments"])
    shown = printed(data, output, describe_text, capsys)
    assert SECRET not in shown
    assert shown.count(f"password={REDACTED}") == 4  # connector and task trace, first line and root cause each
    assert "PSQLException" in shown  # the rest of the trace is kept


@pytest.mark.parametrize("output", ["text", "json"])
def test_bundle_status_prints_a_trace_without_the_url_credential(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rendered = render_bundle(load_bundle(SHIPPED / "postgres-cdc"), "dev")
    (connector,) = rendered.connectors
    live = {
        connector.name: LiveConnector(
            config=dict(connector.config),
            status={
                "connector": {"state": "RUNNING", "worker_id": "w1:8083", "trace": None},
                "tasks": [{"id": 0, "state": "FAILED", "worker_id": "w1:8083", "trace": TRACE}],
            },
        )
    }
    data = {"bundle": rendered.name, "env": rendered.env, "connectors": status_rows(rendered, live)}
    shown = printed(data, output, status_text, capsys)
    assert SECRET not in shown
    assert shown.count(f"password={REDACTED}") == 2
    assert "0:FAILED" in shown or '"state": "FAILED"' in shown


def test_a_failed_apply_reports_the_trace_without_the_url_credential() -> None:
    failed = ApplyFailed("cdc.payments-db", "FAILED (task 0)", TRACE, ["cdc.payments-db"])
    assert SECRET not in str(failed) and SECRET not in failed.trace
    assert f"password={REDACTED}" in str(failed) and "Task.java:42" in failed.trace


def test_a_validation_message_quoting_a_url_loses_its_credential() -> None:
    answer = {
        "configs": [
            {"value": {"name": "connection.url", "errors": [f"Cannot connect to {URL} (refused)"]}},
            {"value": {"name": "connection.password", "errors": ["Invalid value hunter2"]}},
            {"value": {"name": "topics", "errors": []}},
        ]
    }
    errors = validation_errors(answer, ["hunter2"])
    assert errors == (
        ("connection.password", f"Invalid value {REDACTED}"),
        ("connection.url", f"Cannot connect to {URL.replace(SECRET, REDACTED)} (refused)"),
    )


CARD_TRACE = (
    "org.apache.kafka.connect.errors.DataException: cannot convert value 4111\u00a01111\u20131111.1111 of field pan\n"
    "\tat io.example.Converter.convert(Converter.java:42)\n"
    'Caused by: java.lang.NumberFormatException: For input string: "4111 1111 1111 1111" at 1795884189781'
)


@pytest.mark.parametrize("output", ["text", "json"])
def test_a_trace_quoting_a_card_number_shows_its_last_four_only(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 46 item 5: a task's trace quoting a record's card number, whatever separates its digits, in the
    connectors view, `bundle status` and `connect describe` (all read ``shown_trace``) and a failed apply."""
    status = {
        "connector": {"state": "RUNNING", "worker_id": "w1:8083", "trace": None},
        "tasks": [{"id": 0, "state": "FAILED", "worker_id": "w1:8083", "trace": CARD_TRACE}],
        "type": "sink",
    }
    info = {"type": "sink", "config": {"connector.class": "io.example.JdbcSink", "topics": "payments"}}
    shown = printed(describe_view("jdbc-sink", status, info, frozenset(), ["payments"]), output, describe_text, capsys)
    assert "4111" not in shown and shown.count("************1111") == 2
    assert "1795884189781" in shown  # a number that is no card number stays readable
    failed = ApplyFailed("jdbc-sink", "FAILED (task 0)", CARD_TRACE, [])
    assert "4111" not in str(failed) + failed.trace and "Converter.java:42" in failed.trace

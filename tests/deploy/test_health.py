"""Reading Connect status documents (pure)."""

from __future__ import annotations

from deploy.connector_status import failure, reached, trace_summary


def status(connector: str, *tasks: str) -> dict[str, object]:
    return {
        "connector": {"state": connector},
        "tasks": [{"id": i, "state": s, "trace": f"t{i}"} for i, s in enumerate(tasks)],
    }


def test_running_needs_the_connector_and_every_task_running() -> None:
    assert reached("running", status("RUNNING", "RUNNING", "RUNNING"))
    assert not reached("running", status("RUNNING", "RUNNING", "UNASSIGNED"))
    assert not reached("running", status("RUNNING"))  # no tasks yet is not running
    assert reached("paused", status("PAUSED")) and reached("paused", status("PAUSED", "PAUSED"))
    assert reached("stopped", status("STOPPED")) and not reached("stopped", status("STOPPED", "RUNNING"))


def test_failure_names_the_failed_task_and_its_trace() -> None:
    assert failure(status("RUNNING", "RUNNING", "FAILED")) == ("FAILED (task 1)", "t1")
    assert failure(status("RUNNING", "RUNNING")) is None


def test_trace_summary_keeps_the_first_line_and_the_root_cause() -> None:
    trace = "ConnectException: Tolerance exceeded\n\tat X\nCaused by: A\nCaused by: B: no field"
    assert trace_summary(trace) == "ConnectException: Tolerance exceeded ... Caused by: B: no field"
    assert trace_summary("") is None and trace_summary("one line") == "one line"

"""Progress rendering (bars on a terminal, plain lines otherwise) and when chaos strikes."""

from __future__ import annotations

import io

from demo.chaos import DECISIONS_FLOWING, KILL_INFER, RESTART_WORKER, ChaosPlan, describe, gate_before
from demo.progress import ProgressDisplay, StageProgress, render_bars, render_line, stack_line


def stages(decided: int, delivered: int, expected: int = 100, requests: int | None = 20) -> dict[str, StageProgress]:
    return {
        "ingested": StageProgress("ingested", 120, 120),
        "enriched": StageProgress("enriched", 120, 120),
        "decided": StageProgress("decided", decided, expected),
        "delivered": StageProgress("delivered", delivered, requests),
    }


def test_bars_show_done_total_and_share() -> None:
    line, unknown = render_bars([StageProgress("decided", 50, 200), StageProgress("delivered", 3, None)], width=10)
    assert line == "decided    [##........]      50/200      25%"
    assert "3/?" in unknown and "0%" in unknown


def test_plain_line_names_every_stage() -> None:
    assert render_line(list(stages(10, 2).values()), 12.3) == (
        "progress    12s: ingested 120/120, enriched 120/120, decided 10/100, delivered 2/20"
    )


def test_no_escape_codes_when_not_a_terminal() -> None:
    out = io.StringIO()
    display = ProgressDisplay(out, tty=False)
    display.update(list(stages(10, 2).values()))
    display.say("chaos: something")
    display.update(list(stages(11, 2).values()))  # within the interval: not written
    display.finish()
    text = out.getvalue()
    assert "\x1b" not in text
    assert text.splitlines() == [
        text.splitlines()[0],
        "chaos: something",
        text.splitlines()[2],
    ]
    assert "decided 10/100" in text.splitlines()[0] and "decided 11/100" in text.splitlines()[2]


def test_bars_are_redrawn_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    display = ProgressDisplay(out, tty=True)
    display.update(list(stages(10, 2).values()))
    display.update(list(stages(20, 2).values()))
    assert out.getvalue().count("\x1b[4F") == 1  # the second draw moved up over the first four bars


def test_chaos_waits_until_infer_is_mid_flight_then_the_worker_follows_once_receipts_flow() -> None:
    plan = ChaosPlan(kill_infer_at=0.3)
    assert plan.due(stages(0, 0), set()) == []
    assert plan.due(stages(29, 0), set()) == []
    assert plan.due(stages(30, 3), set()) == [KILL_INFER, RESTART_WORKER]  # both down together
    assert plan.due(stages(30, 0), set()) == [KILL_INFER]  # requests asked, no receipt yet: the sink is idle
    assert plan.due(stages(30, 0), {KILL_INFER}) == []
    assert plan.due(stages(30, 1), {KILL_INFER}) == [RESTART_WORKER]
    assert plan.due(stages(100, 20), {KILL_INFER, RESTART_WORKER}) == []


def test_chaos_still_fires_when_a_stage_finished_between_two_looks() -> None:
    assert ChaosPlan().due(stages(100, 20), set()) == [KILL_INFER, RESTART_WORKER]


def test_describe_says_where_the_pipeline_was() -> None:
    assert describe(stages(5, 1, requests=None)).endswith("decided 5/100, delivered 1/?")


def test_the_worker_restart_does_not_wait_for_receipts_when_nothing_was_asked() -> None:
    assert ChaosPlan().due(stages(60, 0, requests=0), {KILL_INFER}) == [RESTART_WORKER]
    assert ChaosPlan().due(stages(60, 0, requests=None), {KILL_INFER}) == [RESTART_WORKER]


def test_the_writer_waits_for_decisions_then_for_the_worker_restart() -> None:
    assert [gate_before(w, chaos=True) for w in (0.0, 0.49, 0.5, 0.79, 0.8, 0.99)] == [
        None, None, DECISIONS_FLOWING, DECISIONS_FLOWING, RESTART_WORKER, RESTART_WORKER,
    ]  # fmt: skip
    assert gate_before(0.9, chaos=False) == DECISIONS_FLOWING


def test_the_stack_line_prints_the_spark_web_uis_of_a_cluster() -> None:
    """On a Spark cluster the demo names the master's and each worker's web UI (executors, their logs), not only
    the spark:// URL jobs are submitted to."""
    uis = ("http://127.0.0.1:8080", "http://127.0.0.1:8081", "http://127.0.0.1:8082")
    line = stack_line("127.0.0.1:9092", ["http://127.0.0.1:8083"], "spark://127.0.0.1:7077", 2, uis)
    assert line == (
        "stack: Kafka 127.0.0.1:9092, Connect http://127.0.0.1:8083, Spark spark://127.0.0.1:7077 (2 workers; "
        "web UIs: master http://127.0.0.1:8080, worker http://127.0.0.1:8081, worker http://127.0.0.1:8082)"
    )
    assert stack_line("127.0.0.1:9092", ["http://a:1", "http://b:2"]) == (
        "stack: Kafka 127.0.0.1:9092, Connect http://a:1, http://b:2"
    )

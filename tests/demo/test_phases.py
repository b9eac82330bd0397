"""The demo's phase clock and its PHASES table; when each replay may start."""

from __future__ import annotations

import dataclasses

from demo.facts import Expectation
from demo.phases import Phase, PhaseClock, phase_lines
from demo.report import build_report, report_text
from demo.stages import PipelineCounts
from ikkai.contract.topics import DECISIONS_FRAUD as DECISIONS
from ikkai.contract.topics import DLQ_ENRICH
from ikkai.contract.topics import EVENTS_PAYMENTS as EVENTS
from ikkai.contract.topics import INGEST_PAYMENTS as INGEST
from tests.demo.test_report import clean_facts


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_phases_are_timed_from_the_clocks_origin_and_may_overlap() -> None:
    time = FakeTime()
    clock = PhaseClock(time)
    time.now = 102.0
    clock.start("connect worker")
    time.now = 105.0
    with clock.phase("enrich start-up"):
        time.now = 130.0
    time.now = 140.0
    clock.end("connect worker")

    assert clock.phases() == [Phase("connect worker", 2.0, 40.0), Phase("enrich start-up", 5.0, 30.0)]
    assert clock.phases()[0].seconds == 38.0


def test_a_phase_keeps_its_first_start_and_one_never_ended_is_left_out() -> None:
    time = FakeTime()
    clock = PhaseClock(time)
    clock.start("replay: enrich")
    time.now = 110.0
    clock.start("replay: enrich")  # a second start does not move it
    clock.start("infer start-up")  # never ends: the job never printed its first line
    clock.start("chaos: kill -9 infer", at=104.0)  # began before it was known to recover
    time.now = 120.0
    clock.end("replay: enrich")
    clock.end("chaos: kill -9 infer")

    assert [(p.name, p.start_s, p.end_s) for p in clock.phases()] == [
        ("replay: enrich", 0.0, 20.0),
        ("chaos: kill -9 infer", 4.0, 20.0),
    ]
    assert clock.ended("replay: enrich") and clock.started("infer start-up") and not clock.ended("infer start-up")


def test_the_table_shows_start_length_and_when_each_phase_ran() -> None:
    phases = [Phase("broker", 0.0, 10.0).as_dict(), Phase("replay: infer", 50.0, 100.0).as_dict()]

    header, broker, replay = phase_lines(phases, total_s=100.0, width=10)

    assert header.startswith("PHASES") and "overlapping" in header
    assert broker == "broker             0s     10s  |#         |"
    assert replay == "replay: infer     50s     50s  |     #####|"
    assert phase_lines([]) == []


def test_the_report_carries_the_phases_in_json_and_text() -> None:
    facts = dataclasses.replace(
        clean_facts(), phases=(Phase("setup", 0.0, 1.04), Phase("stop", 90.0, 100.0)), seconds={"total": 100.0}
    )

    report = build_report(facts)

    assert report["phases"] == [
        {"phase": "setup", "start_s": 0.0, "seconds": 1.0},
        {"phase": "stop", "start_s": 90.0, "seconds": 10.0},
    ]
    text = report_text(report)
    assert "\nPHASES" in text and "\nstop " in text and text.endswith("demo passed (total 100s)")


def test_a_replay_starts_only_once_its_input_topic_is_complete() -> None:
    expectation = Expectation(lines=10, events=8, dead_letters={"not_json": 2})

    def ready(**counts: int) -> dict[str, bool]:
        return PipelineCounts(expectation, counts).replay_inputs_complete()

    assert ready() == {"enrich": False, "infer": False}
    assert ready(**{INGEST: 9, EVENTS: 8, DLQ_ENRICH: 1}) == {"enrich": False, "infer": False}
    assert ready(**{INGEST: 10, EVENTS: 7, DLQ_ENRICH: 2}) == {"enrich": True, "infer": False}
    # every line has its outcome: events.payments is complete, though nothing is decided yet
    assert ready(**{INGEST: 10, EVENTS: 8, DLQ_ENRICH: 2, DECISIONS: 0}) == {"enrich": True, "infer": True}

"""The report as one HTML page (``ikkai demo --html``): self-contained, every picture, every invariant, escaped."""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli.demo
from demo.chaos import KILL_INFER
from demo.invariants import Invariant
from demo.phases import Phase
from demo.report import build_report, report_text
from demo.report_html import report_html
from tests.demo.test_report import clean_facts

HOSTILE = "<script>alert(1)</script>"
# Every attribute that makes a browser fetch: its value must stay inside the page ("#..." or "data:").
FETCHING = re.compile(r"""\b(?:src|href|xlink:href|action)\s*=\s*["']?([^"'\s>]*)""", re.IGNORECASE)


def a_report() -> dict[str, object]:
    facts = dataclasses.replace(
        clean_facts(), phases=(Phase("setup", 0.0, 12.0), Phase("writing raw lines", 12.0, 40.0),
                               Phase(f"chaos: {KILL_INFER}", 20.0, 21.0), Phase("read topics", 40.0, 45.0)),
    )  # fmt: skip
    return build_report(facts)


def test_the_page_fetches_nothing() -> None:
    page = report_html(a_report())

    fetched = [value for value in FETCHING.findall(page) if not value.startswith(("#", "data:"))]
    assert fetched == []
    assert "@import" not in page and not re.search(r"url\(\s*['\"]?(?!#|data:)", page)
    assert "kozea.github.io" not in page  # pygal's tooltip script


def test_each_picture_is_an_inline_svg_with_its_title() -> None:
    page = report_html(a_report())

    assert page.count("<svg") == 4
    for figure, title in (("phases-chart", "Phases"), ("records-chart", "Records per stage"),
                          ("rates-chart", "Stage rates"), ("latency-chart", "Latency")):  # fmt: skip
        svg = re.search(rf'<figure id="{figure}">(.*?)</figure>', page, re.DOTALL)
        assert svg is not None and "<svg" in svg.group(1), figure
        assert re.search(rf"<title>{title}</title>|>{title}</text>", svg.group(1)), figure
    assert "writing raw lines" in page and f"chaos: {KILL_INFER}" in page  # the timeline's phases


def test_the_latency_histogram_counts_each_wait_once() -> None:
    report = a_report()

    histograms = report["latency_histogram_ms"]
    assert isinstance(histograms, dict)
    for name, summary in report["latency_ms"].items():  # type: ignore[attr-defined]
        assert sum(b["count"] for b in histograms[name]) == summary["count"], name
    assert histograms["ingest_to_decision"][-1] == {"from_ms": 500, "to_ms": 1000, "count": 2}


def test_the_stage_rates_add_up_to_the_records_of_each_stage() -> None:
    report = a_report()

    rates = report["stage_rates"]
    assert isinstance(rates, dict) and rates["step_s"] == 1.0
    for stage, topics in report["stages"].items():  # type: ignore[attr-defined]
        assert sum(rates["rates"][stage]) * rates["step_s"] == sum(topics.values()), stage


def test_every_line_of_the_text_report_and_each_invariant_is_in_the_page() -> None:
    report = a_report()
    page = report_html(report)

    for line in report_text(report).splitlines():
        assert html.escape(line, quote=False) in page, line
    for invariant in report["invariants"]:  # type: ignore[attr-defined]
        assert f"<td>{html.escape(invariant['name'])}</td>" in page


def test_a_hostile_string_in_the_report_is_escaped() -> None:
    report = a_report()
    report["invariants"] = [*report["invariants"], Invariant(f"a note {HOSTILE}", False, f"detail {HOSTILE}").as_dict()]  # type: ignore[misc]
    report["failed"], report["passed"] = [f"a note {HOSTILE}"], False
    report["phases"] = [Phase(f"phase {HOSTILE}", 0.0, 1.0).as_dict()]

    page = report_html(report)

    assert HOSTILE not in page
    assert html.escape(HOSTILE) in page
    assert "<script" not in page.replace('<script type="text/javascript">window.pygal', "")


def test_ikkai_demo_html_writes_the_page_and_keeps_the_text_report_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = a_report()
    monkeypatch.setattr(cli.demo, "run_demo", lambda options: report)
    page = tmp_path / "report.html"

    result = CliRunner().invoke(cli.demo.demo, ["--no-chaos", "--html", str(page)])

    assert result.exit_code == 0, result.output
    assert report_text(report) in result.stdout
    written = page.read_text(encoding="utf-8")
    assert written.startswith("<!doctype html>") and written.count("<svg") == 4
    assert html.escape(report_text(report), quote=False) in written


def test_ikkai_demo_html_into_a_missing_directory_stops_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[object] = []
    monkeypatch.setattr(cli.demo, "run_demo", lambda options: runs.append(options) or a_report())

    result = CliRunner().invoke(cli.demo.demo, ["--html", str(tmp_path / "missing" / "report.html")])

    assert result.exit_code == 2
    assert "--html" in result.output and "does not exist" in result.output
    assert runs == []

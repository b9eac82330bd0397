"""The demo's report as one self-contained HTML page (``ikkai demo --html FILE``). Pure.

The page holds the text report as it is printed, the invariants as a table and three pictures:
the phases on a timeline, the records per second into each stage, and a histogram of the
latencies (ingest → decision, decision → receipt). pygal (Kozea) draws them on the server as
SVG, written inline; its tooltip script, which it would fetch from a CDN, is switched off
(``js=[]``) as on the operator page (deploy/serve/page/charts.py). Jinja2 renders the page with
autoescape on: every value of the report is escaped; only pygal's SVG, which escapes its own
labels, goes in as markup. Nothing is fetched: the page opens from a file with no network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pygal
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pygal.style import DefaultStyle

from demo.report import report_text

CHART = {
    "js": [],
    "width": 900,
    "legend_at_bottom": True,
    "truncate_legend": -1,
    "truncate_label": -1,
    "dynamic_print_values": False,
}
LATENCIES = (("ingest_to_decision", "ingest → decision"), ("decision_to_receipt", "decision → receipt"))

_PAGES = Environment(loader=PackageLoader("demo", "templates"), autoescape=select_autoescape(["html"]))


def _svg(chart: pygal.graph.graph.Graph) -> Markup:
    return Markup(chart.render(is_unicode=True, disable_xml_declaration=True))  # noqa: S704 - pygal escapes its text


def phases_chart(phases: Sequence[Mapping[str, Any]]) -> Markup:
    """Each phase a bar from its start to its end on the demo's clock (seconds since it began), the first on top;
    chaos actions in their own colour. The bar stands on an invisible one as long as the wait before it."""
    chart = pygal.HorizontalStackedBar(
        **CHART, height=max(200, 80 + 26 * len(phases)), title="Phases", x_title="seconds since the demo began",
        style=DefaultStyle(colors=("transparent", "#3366cc", "#dc3912")), show_y_guides=False, show_legend=False,
    )  # fmt: skip
    rows = list(reversed(phases))
    chaos = [p["phase"].startswith("chaos: ") for p in rows]
    chart.x_labels = [p["phase"] for p in rows]
    chart.add("before", [p["start_s"] for p in rows])
    chart.add("phase", [None if c else p["seconds"] for p, c in zip(rows, chaos, strict=True)])
    chart.add("chaos", [p["seconds"] if c else None for p, c in zip(rows, chaos, strict=True)])
    return _svg(chart)


def stage_rates_chart(stage_rates: Mapping[str, Any]) -> Markup:
    """Records per second into each stage over the run, from the first record any topic holds."""
    chart = pygal.Line(
        **CHART, height=300, title="Stage rates", x_title="seconds since the first record",
        y_title="records per second", show_dots=True, dots_size=2, include_x_axis=True, x_labels_major_count=6,
        show_minor_x_labels=False,
    )  # fmt: skip
    step = stage_rates["step_s"] or 1.0
    longest = max((len(v) for v in stage_rates["rates"].values()), default=0)
    chart.x_labels = [f"{i * step:.0f}" for i in range(longest)]
    for stage, rates in stage_rates["rates"].items():
        chart.add(stage, rates)
    return _svg(chart)


def records_chart(stages: Mapping[str, Mapping[str, int]]) -> Markup:
    """Records per topic (read_committed), one colour per stage."""
    topics = [topic for per_stage in stages.values() for topic in per_stage]
    chart = pygal.HorizontalBar(
        **CHART, height=60 + 30 * len(topics), title="Records per stage", x_title="records", print_values=True
    )
    chart.x_labels = topics
    for stage, per_stage in stages.items():
        chart.add(stage, [per_stage.get(topic) for topic in topics])
    return _svg(chart)


def _bucket(b: Mapping[str, Any]) -> str:
    def ms(v: float) -> str:
        return f"{v / 1000:g}s" if v >= 1000 else f"{v:g}ms"

    return f"≥ {ms(b['from_ms'])}" if b["to_ms"] is None else f"{ms(b['from_ms'])}–{ms(b['to_ms'])}"


def latency_chart(histograms: Mapping[str, Sequence[Mapping[str, Any]]]) -> Markup:
    """How many waits fell in each bucket, for each latency the report measures."""
    chart = pygal.Bar(**CHART, height=300, title="Latency", x_title="wait", y_title="count", x_label_rotation=30)
    widest = max((list(h) for h in histograms.values()), key=len, default=[])
    chart.x_labels = [_bucket(b) for b in widest]
    for name, label in LATENCIES:
        counts = [b["count"] for b in histograms.get(name, [])]
        chart.add(label, counts + [0] * (len(widest) - len(counts)))
    return _svg(chart)


def report_html(r: dict[str, Any]) -> str:
    """The report (``build_report``) as one HTML page: the text report, the invariants and the pictures."""
    charts = {
        "phases": phases_chart(r.get("phases", [])),
        "records": records_chart(r["stages"]),
        "rates": stage_rates_chart(r["stage_rates"]),
        "latency": latency_chart(r["latency_histogram_ms"]),
    }
    return _PAGES.get_template("report.html").render(report=r, text=report_text(r), charts=charts, latencies=LATENCIES)

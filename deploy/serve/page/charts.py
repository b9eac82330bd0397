"""The page's pictures: SVG drawn on the server by pygal, from plain samples. Pure.

pygal (Kozea) draws the chart; no chart code of our own and no JavaScript library. The page shows the
SVG through an ``<img>``, where a browser runs no script, and pygal's tooltip script is switched off
(``js=[]``): nothing is fetched from elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import pygal

from deploy.eos_view.flow import STAGES, Sample, rates
from deploy.eos_view.latency import BUCKET_SECONDS, Bucket


def flow_points(samples: Sequence[Sample], topic: str) -> list[tuple[float, float | None]]:
    """(seconds before the newest sample, records per second) at the end of each interval: spaced by time, so
    unequal gaps between samples (a slow read, a viewer-less pause) show as they were."""
    last = samples[-1].at if samples else 0.0
    return [(round(s.at - last, 1), rate) for s, rate in zip(samples[1:], rates(samples, topic), strict=True)]


def flow_chart(samples: Sequence[Sample]) -> str:
    """Records per second into each stage over the kept samples, on a time axis, the newest on the right (0)."""
    chart = pygal.XY(
        js=[], width=900, height=300, show_dots=True, dots_size=2, dynamic_print_values=False,
        x_title="seconds ago", y_title="records per second", legend_at_bottom=True, include_x_axis=True,
        truncate_legend=-1, allow_interruptions=True, x_value_formatter=lambda x: f"{-x:.0f}",
    )  # fmt: skip
    for stage, topic in STAGES:
        chart.add(f"{stage} ({topic})", flow_points(samples, topic))
    return str(chart.render(is_unicode=True))


def latency_chart(decided: Sequence[Bucket], receipted: Sequence[Bucket], now_ms: int) -> str:
    """p50 and p99 of produced → decision and of decision → receipt per bucket, in seconds, the newest on the
    right; an empty bucket leaves a gap."""
    chart = pygal.Line(
        js=[], width=900, height=300, show_dots=True, dots_size=2, dynamic_print_values=False,
        x_title="minutes ago" if BUCKET_SECONDS == 60 else f"buckets of {BUCKET_SECONDS} s", y_title="seconds",
        legend_at_bottom=True, include_x_axis=True, truncate_legend=-1, allow_interruptions=True,
    )  # fmt: skip
    width = BUCKET_SECONDS * 1000
    chart.x_labels = [str((now_ms - b.start_ms) // width) for b in decided or receipted]
    for name, series in (("produced → decision", decided), ("decision → receipt", receipted)):
        for q in ("p50", "p99"):
            values = [getattr(b, f"{q}_ms") for b in series]
            chart.add(f"{name} {q}", [None if v is None else v / 1000 for v in values])
    return str(chart.render(is_unicode=True))

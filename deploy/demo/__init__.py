"""``ikkai demo``: the platform end to end on its own embedded stack, with chaos, a report and a replay.

Pure parts: ``measures`` (digests, percentiles), ``invariants``, ``report``, ``progress``
rendering, ``chaos`` timing, ``follow`` (when to stop following the pipeline). I/O: ``topics``
(Kafka), ``children`` (processes), ``collect``, and ``run``, the orchestration.
"""

from deploy.demo.command import demo
from deploy.demo.report import build_report, report_text
from deploy.demo.run import DemoOptions, run_demo

__all__ = ["DemoOptions", "build_report", "demo", "report_text", "run_demo"]

"""The main job: the platform end to end on its own embedded stack, with chaos, a report and a replay.

Run by ``ikkai demo`` (``cli/demo.py``). Nothing in the product imports this package: the simulators
(``payments_simulation``, ``raw_payments``) and the reference HTTP receiver (``receiver``) live here
because only the demo, the tests and the benchmarks use them.

Pure parts: ``measures`` (digests, percentiles), ``invariants``, ``report``, ``progress``
rendering, ``chaos`` timing, ``follow`` (when to stop following the pipeline). I/O: ``topics``
(Kafka), ``children`` (processes), ``collect``, and ``run``, the orchestration.
"""

from demo.report import build_report, report_text
from demo.run import DemoOptions, run_demo

__all__ = ["DemoOptions", "build_report", "report_text", "run_demo"]

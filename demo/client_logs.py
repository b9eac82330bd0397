"""Where librdkafka's lines go during the demo: a file of the run folder, never the demo's own output.

The demo's readers and writers (``demo.topics``, ``demo.raw_payments``) give their Kafka
clients ``KAFKA_LOG`` as librdkafka's logger, and the page the demo serves logs through ``ikkai.*`` loggers too
(its flow and health readers, the record of applies): ``kept_in(run_dir)`` sends every ``ikkai`` logger to
``<run_dir>/clients.log`` and stops them reaching stderr. Without it (the readers used outside a demo run),
librdkafka's warnings go to Python logging like any other warning.
"""

from __future__ import annotations

import logging
from pathlib import Path

KAFKA_LOG = logging.getLogger("ikkai.demo.kafka")
LOG_FILE = "clients.log"
_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class _RunLog(logging.FileHandler):
    """The run folder's log file (a handler of this class is the demo's own, replaced at the next run)."""


def kept_in(run_dir: Path) -> Path:
    """Send every ``ikkai`` logger (librdkafka's lines included) to ``run_dir/clients.log``, not to stderr."""
    path = run_dir / LOG_FILE
    root = logging.getLogger("ikkai")
    for old in [h for h in root.handlers if isinstance(h, _RunLog)]:
        root.removeHandler(old)
        old.close()
    handler = _RunLog(path)
    handler.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False
    return path

"""The exactly-once health of every environment, sampled in the background whether or not anyone looks.

``ikkai serve`` starts one ``HealthSampler`` (``ControlPlane.health_seconds``, ``--health-interval``): every interval
it takes a sample of each environment's health (``deploy.eos_view.health``, through the page's own readers, so the
health view shows the sampler's last sample and never takes one while the sampler runs) and hands its numbers to
the metrics (``ikkai_eos_*`` on ``/metrics``). So an open transaction's clock starts when the sampler first sees it,
not at the first page view, and an alert needs no browser open. One sample costs the reads ``deploy.eos_view.health``
lists, among them a short-lived child process for the sink groups' offsets (about half a second of CPU): every
``DEFAULT_SECONDS`` by default, that is under 3 % of one core. No exception ends the sampler: a failed sample is
kept as the environment's outcome (the view says why, the metrics say ``markers`` could not be read).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from deploy.eos_view.health import HealthReader, HealthUnreadable
from deploy.serve.metrics import Metrics
from ikkai.errors import IkkaiError
from ikkai.redaction import redact_urls

DEFAULT_SECONDS = 20.0
MAX_REASON = 200  # characters of a failure logged
log = logging.getLogger("ikkai.serve.health")


class HealthSampler:
    """Samples each environment's health every ``interval`` seconds until ``stopping`` is set."""

    def __init__(
        self,
        reader_of: Callable[[str], HealthReader],
        environments: Callable[[], Iterable[str]],
        metrics: Metrics,
        interval: float,
        stopping: threading.Event,
    ) -> None:
        self.reader_of = reader_of
        self.environments = environments
        self.metrics = metrics
        self.interval = interval
        self.stopping = stopping
        self.failing: dict[str, str] = {}  # environment → why its last sample could not be taken, as logged

    def once(self) -> None:
        for env in self.environments():
            try:
                health = self.reader_of(env).sampled()
            except HealthUnreadable:
                self.metrics.saw_health(env, None)  # the view shows the reader's error itself
            except Exception as exc:  # noqa: BLE001 - the sampler outlives any one failure; each is logged once
                reason = (str(exc).splitlines() or [""])[0] if isinstance(exc, IkkaiError) else type(exc).__name__
                reason = redact_urls(reason)[:MAX_REASON]
                if self.failing.get(env) != reason:  # an environment without a cluster is said once, not every pass
                    log.warning("health of %s not sampled: %s", env, reason)
                self.failing[env] = reason
                self.metrics.saw_health(env, None)
            else:
                self.failing.pop(env, None)
                self.metrics.saw_health(env, health)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.once()
            self.stopping.wait(self.interval)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="ikkai-health-sampler", daemon=True)
        thread.start()
        return thread

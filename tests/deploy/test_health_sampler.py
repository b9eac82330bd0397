"""The background health sampler (deploy/serve/page/health_sampler.py) without Kafka: each environment's sample reaches
the metrics, a failed one is said as a problem and no failure of one environment stops the others or the sampler.
On the real stack, with the page and /metrics, it is test_page_health.py."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from deploy.eos_view.health import Health, HealthReader, HealthUnreadable, health_of
from deploy.serve.metrics import Metrics
from deploy.serve.page.app import Page
from deploy.serve.page.health_sampler import HealthSampler
from deploy.serve.service import ControlPlane
from deploy.serve.tokens import ServeTokens
from ikkai.contract.kafka import KafkaContext
from tests.deploy.test_page import SHIPPED, TOKEN


class Answering(HealthReader):
    def __init__(self, outcome: Health | Exception) -> None:
        super().__init__(KafkaContext("127.0.0.1:9"))
        self.outcome = outcome
        self.calls = 0

    def sampled(self) -> Health:
        self.calls += 1
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def test_every_environment_is_sampled_and_a_failure_is_a_problem_not_the_end() -> None:
    readers = {
        "dev": Answering(health_of(1_000.0, {}, {}, {}, {})),
        "staging": Answering(HealthUnreadable("127.0.0.1:9", "Broker transport failure")),
        "prod": Answering(RuntimeError("not ours")),
    }
    metrics = Metrics()
    stopping = threading.Event()
    sampler = HealthSampler(readers.__getitem__, lambda: list(readers), metrics, 0.01, stopping)
    sampler.once()
    assert metrics.eos["dev"].at == 1_000.0 and not any(metrics.eos["dev"].problems.values())
    assert metrics.eos["staging"].at is None and metrics.eos["staging"].problems["markers"]
    assert metrics.eos["prod"].problems["markers"]  # an unexpected failure is logged, and the next env goes on
    assert sampler.failing == {"prod": "RuntimeError"}  # logged once while it stays the same
    thread = sampler.start()
    give_up = time.monotonic() + 30
    while readers["dev"].calls < 3:  # it goes on by itself, nobody asking
        assert time.monotonic() < give_up
        time.sleep(0.01)
    stopping.set()
    thread.join(10)
    assert not thread.is_alive()


def test_only_environments_a_token_covers_are_sampled(tmp_path: Path) -> None:
    """The demo's page covers dev only; prod, which no token reaches and its clusters file does not name,
    would fall back to whatever embedded stack the default home holds: it is never read."""
    shutil.copytree(SHIPPED / "payments-ingest", tmp_path / "payments-ingest")  # values for dev and prod
    dev_only = ServeTokens(((TOKEN, frozenset({"dev"})),))
    page = Page(ControlPlane(dev_only, tmp_path, connect_url="http://127.0.0.1:9"))
    assert set(page.environments()) == {"dev", "prod"}
    assert page.sampled_environments() == ["dev"]
    every = Page(ControlPlane(ServeTokens.single(TOKEN), tmp_path, connect_url="http://127.0.0.1:9"))
    assert sorted(every.sampled_environments()) == ["dev", "prod"]

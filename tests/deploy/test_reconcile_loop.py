"""The reconcile loop of ``ikkai serve`` outlives any exception and says so in ``/healthz``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from deploy.serve.service import MAX_PAUSE_SECONDS, ControlPlane, ReconcileLoop
from tests.deploy.serving import serve

TOKEN = "loop-test-token-" + "w" * 16


class ProxyInTheWay(ControlPlane):
    """A plane whose Connect sits behind a proxy answering 200 with an HTML page."""

    def run(self, bundle: str, env: str, verb: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        return 200, json.loads("<html>maintenance</html>")  # what the REST client meets: not an IkkaiError

    def request(self, bundle: str, env: str) -> Any:
        raise json.JSONDecodeError("Expecting value", "<html>", 0)


@pytest.fixture
def plane(tmp_path: Path) -> ProxyInTheWay:
    return ProxyInTheWay(TOKEN, tmp_path)


@pytest.fixture
def healthz(plane: ProxyInTheWay) -> Iterator[str]:
    for url in serve(plane):
        yield f"{url}/healthz"


def test_an_exception_that_is_not_ours_leaves_the_loop_running_and_healthz_degraded(
    plane: ProxyInTheWay, healthz: str
) -> None:
    assert requests.get(healthz, timeout=5).json() == {"status": "ok"}
    loop = ReconcileLoop(plane, [("payments-ingest", "prod")], interval=0.01)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while plane.metrics.reconcile_runs < 3:
            assert thread.is_alive(), "the loop thread died"
            assert time.monotonic() < deadline, "the loop never ran three passes"
            time.sleep(0.05)
        assert thread.is_alive()
        assert plane.metrics.reconcile_failures["JSONDecodeError"] >= 6  # apply and restart, every pass
        health = requests.get(healthz, timeout=5).json()
        assert health["status"] == "degraded"
        assert health["reason"].startswith("reconcile: payments-ingest/prod: JSONDecodeError: Expecting value")
        assert "ikkai_reconcile_failures_total{" in plane.metrics.render()
    finally:
        loop.stopping.set()
        thread.join(30)
    assert not thread.is_alive()


def test_failed_passes_back_off_up_to_a_cap_and_a_clean_pass_clears_the_health(plane: ProxyInTheWay) -> None:
    loop = ReconcileLoop(plane, [("payments-ingest", "prod")], interval=1.0)
    loop.once()
    loop.once()
    assert loop.failed_passes == 2 and loop.pause() == 4.0 and plane.health()["status"] == "degraded"
    loop.failed_passes = 5_000
    assert loop.pause() == MAX_PAUSE_SECONDS
    loop.targets = []  # nothing left to fail
    loop.once()
    assert loop.failed_passes == 0 and loop.pause() == 1.0 and plane.health() == {"status": "ok"}


def test_a_bundle_whose_template_never_ends_fails_the_pass_and_healthz_says_degraded(tmp_path: Path) -> None:
    """Rendering is bounded: a template looping 10^10 times stops at its step budget, the pass ends, /healthz says
    why (today the pass never ended and /healthz said ok)."""
    folder = tmp_path / "bundles" / "bomb"
    (folder / "templates").mkdir(parents=True)
    (folder / "values").mkdir()
    (folder / "bundle.yaml").write_text(
        "name: bomb\nowner_prefix: bomb.\nconnectors: [{name: one, template: templates/one.json.j2}]\n"
    )
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    (folder / "templates" / "one.json.j2").write_text(loops + '{"topic": "ingest.x"}\n')
    (folder / "values" / "dev.yaml").write_text("{}\n")
    plane = ControlPlane(TOKEN, tmp_path / "bundles", connect_url="http://127.0.0.1:9")  # nothing listens there
    loop = ReconcileLoop(plane, [("bomb", "dev")], interval=60)
    for url in serve(plane):
        loop.once()
        assert plane.metrics.reconcile_runs == 1
        assert requests.get(f"{url}/healthz", timeout=5).json()["status"] == "degraded"
        assert plane.metrics.reconcile_failures["BundleError"] == 1  # the apply (the restart step met no Connect)
        assert loop.errors[0].startswith("bundle bomb templates/one.json.j2 line 1: rendering stopped: more than")

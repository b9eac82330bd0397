"""Every bundle's templates read their environment's Kafka cluster as ``kafka.bootstrap_servers``: the shipped
outbox-sink renders for dev with its shipped values alone (the page, which passes no ``--set``, shows it), and an
environment's own value still wins. Pure (a clusters file, no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy import bundle_ops
from deploy.bundle_ops import BundleRequest
from ikkai.errors import IkkaiError

RECEIPTS = "outbox.receipts.bootstrap.servers"


def clusters(tmp_path: Path, **dev: str) -> Path:
    path = tmp_path / "clusters.yaml"
    prod = {"connect_url": "http://127.0.0.1:9", "bootstrap_servers": "p:9093"}
    path.write_text(yaml.safe_dump({"dev": {"connect_url": "http://127.0.0.1:9", **dev}, "prod": prod}))
    return path


def test_the_outbox_sink_renders_in_dev_with_its_shipped_values_and_the_environments_kafka(tmp_path: Path) -> None:
    request = BundleRequest("outbox-sink", "dev", clusters=clusters(tmp_path, bootstrap_servers="dev-kafka:9092"))
    (connector,) = bundle_ops.rendered(request).connectors
    assert connector.config[RECEIPTS] == "dev-kafka:9092"


def test_an_environments_own_value_and_a_set_win_over_its_cluster(tmp_path: Path) -> None:
    path = clusters(tmp_path, bootstrap_servers="dev-kafka:9092")
    (prod,) = bundle_ops.rendered(BundleRequest("outbox-sink", "prod", clusters=path)).connectors
    assert prod.config[RECEIPTS].startswith("kafka-1.prod.ikkai.internal:9092")  # values/prod.yaml, not p:9093
    overridden = BundleRequest("outbox-sink", "dev", ("kafka.bootstrap_servers=other:9092",), clusters=path)
    (dev,) = bundle_ops.rendered(overridden).connectors
    assert dev.config[RECEIPTS] == "other:9092"


def test_without_a_known_cluster_the_render_says_which_value_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IKKAI_HOME", str(tmp_path / "never-started"))
    monkeypatch.delenv("IKKAI_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("IKKAI_CONNECT_URL", raising=False)
    with pytest.raises(IkkaiError, match="undefined variable 'kafka'"):
        bundle_ops.rendered(BundleRequest("outbox-sink", "dev", clusters=clusters(tmp_path)))

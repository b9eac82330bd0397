"""The key the hostile matrix expects from the shipped sink is the shared v2 vectors' key (issue 44, case 6)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.outbox_sink.hostile_records import idempotency_key

VECTORS = Path(__file__).with_name("idempotency_key_vectors.json")


def test_the_matrix_expects_the_v2_key_of_every_vector() -> None:
    vectors = [v for v in json.loads(VECTORS.read_text())["vectors"] if v["version"] == "v2"]
    assert len(vectors) >= 10
    for v in vectors:
        assert idempotency_key(v["decision_id"], v["effect"], v["target"], v["path"]) == v["key"], v["name"]

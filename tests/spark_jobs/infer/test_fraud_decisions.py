"""The infer job builds its outbox requests through the outbox contract (pure: no stack, no Spark).

A request the contract refuses becomes a dead letter in its place, with the contract's reason;
the decision is written as it would be, and nothing stops.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec
from ikkai.contract.outbox import MAX_ID_BYTES, OutboxRequest, OutboxRequestError
from spark_jobs.infer.fraud_decisions import Topics, decide, requested
from spark_jobs.model.fraud_model import FraudModel, load_snapshots

HOLD = {"decision_id": "d" * 64, "event_time": 1, "model_version": "fraud@1", "action": "hold", "score": 0.9}


def _asking(count: int = 400, seed: int = 7) -> list[dict[str, Any]]:
    """Payments the shipped model holds or sends to review: each asks for at least one side effect."""
    records = payment_records(simulate(seed, payments=count).payments)
    out = decide(_rows(records), FraudModel.load(), load_snapshots(), default_codec(), Topics())
    asked = {bytes(k).decode() for k in out[out["topic"] == "outbox.requests"]["key"]}
    chosen = [r for r in records if r["payment_id"] in asked][:20]
    assert chosen, "the simulated payments ask for no side effect"
    return chosen


def _rows(records: list[dict[str, Any]]) -> pd.DataFrame:
    codec = default_codec()
    return pd.DataFrame({
        "key": [str(r["payment_id"]).encode() for r in records],
        "value": [codec.encode("payment_event", r) for r in records], "topic": "events.payments",
        "partition": 0, "offset": range(100, 100 + len(records)),
    })  # fmt: skip


def test_the_requests_of_an_ordinary_decision_are_the_contracts_own() -> None:
    built = requested({**HOLD, "payment_id": "pay-1"}, "cust-1")
    assert all(isinstance(r, OutboxRequest) for r in built)
    assert [r.effect for r in built if isinstance(r, OutboxRequest)] == ["hold-payment", "notify-customer"]


@pytest.mark.parametrize(
    ("payment_id", "field"),
    [("客" * 128, "key"), ("pay-1\n", "key")],  # 128 characters (enrich's bound) of 3 bytes: over 256 bytes
    ids=["384-byte key", "control character"],
)
def test_a_request_the_contract_refuses_is_returned_as_its_refusal(payment_id: str, field: str) -> None:
    built = requested({**HOLD, "payment_id": payment_id}, "cust-1")
    assert len(built) == 2 and all(isinstance(r, OutboxRequestError) for r in built)
    assert {r.field for r in built if isinstance(r, OutboxRequestError)} == {field}
    assert len(payment_id.encode()) > MAX_ID_BYTES or not payment_id.isprintable()


@pytest.mark.parametrize("bad_id", ["客" * 128, "pay-1\r\n"])
def test_a_refused_request_becomes_a_dead_letter_with_its_reason_and_the_decision_is_written(bad_id: str) -> None:
    codec = default_codec()
    records = _asking()
    bad = dict(records[0], payment_id=bad_id)
    rows = _rows([bad, *records[1:]])
    out = decide(rows, FraudModel.load(), load_snapshots(), codec, Topics())

    # Every payment still gets its decision, the bad one too.
    assert (out["topic"] == "decisions.fraud").sum() == len(records)
    mine = out[out["input_offset"] == 100]
    assert mine["topic"].iloc[0] == "decisions.fraud" and mine["seq"].iloc[0] == 0
    assert codec.decode("fraud_decision", mine["value"].iloc[0])["payment_id"] == bad_id
    # Each of its requests is a dead letter in its place: the input record copied, the contract's reason.
    letters = mine.iloc[1:]
    assert (
        len(letters) >= 1
        and set(letters["topic"]) == {"dlq.infer"}
        and list(letters["seq"]) == [*range(1, len(letters) + 1)]
    )
    for value, headers in zip(letters["value"], letters["headers"], strict=True):
        letter = codec.decode("dead_letter", value)
        assert letter["error_class"] == "OutboxRequestError" == headers["ikkai.dlq.error_class"]
        assert letter["reason"].startswith("outbox request ") and ": key: " in letter["reason"]
        assert letter["reason"] == headers["ikkai.dlq.reason"] and headers["ikkai.dlq.stage"] == "infer"
        assert (letter["source_topic"], letter["source_offset"]) == ("events.payments", 100)
        assert letter["value"] == rows["value"].iloc[0]
    # The other payments' requests are written as they were.
    good = out[out["input_offset"] != 100]
    assert "dlq.infer" not in set(good["topic"]) and (good["topic"] == "outbox.requests").sum() >= 1
    alone = decide(rows.iloc[1:], FraudModel.load(), load_snapshots(), codec, Topics())
    assert good["value"].tolist() == alone["value"].tolist()

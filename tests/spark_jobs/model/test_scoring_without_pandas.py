"""The numpy scoring path decides bit for bit what the pandas path decided (rule 4: same input, same output).

``_scored_with_pandas`` is the decision step as it was with pandas (a DataFrame of the payments,
``training.as_of_snapshots``'s ``merge_asof``, ``training.feature_frame``), kept here as the
reference. A seeded set of payments and snapshots covers the edges: customers without a
snapshot, events before a customer's first snapshot, a snapshot starting at the event's very
millisecond, two snapshots of one customer with the same valid_from, empty cells (and ``NA``) in
every snapshot column, and thresholds set to scores that occur, so ties are decided too.
"""

from __future__ import annotations

import dataclasses
import io
import random
from typing import Any

import numpy as np
import pandas as pd
import pytest

from spark_jobs.model.fraud_model import (
    FEATURES,
    SNAPSHOT_TYPES,
    FraudModel,
    Snapshots,
    load_snapshots,
    payment_features,
)
from spark_jobs.model.training import as_of_snapshots, feature_frame

TIMES = [1_767_225_600_000 + n * 3_600_000 * 7 for n in range(12)]  # few distinct times: equal timestamps abound


def _scored_with_pandas(
    payments: dict[str, list[Any]], model: FraudModel, snapshots: Snapshots
) -> tuple[dict[str, np.ndarray], list[int | None], np.ndarray, list[str]]:
    frame = pd.read_csv(io.BytesIO(snapshots.data), dtype=SNAPSHOT_TYPES)
    joined = as_of_snapshots(pd.DataFrame(payments), frame)
    features = feature_frame(joined)
    scores = model.score(features)
    as_of = [None if pd.isna(t) else int(t) for t in joined["features_as_of"].tolist()]
    return {n: features[n].to_numpy(dtype=np.float64) for n in FEATURES}, as_of, scores, model.actions(scores).tolist()


def _scored(
    payments: dict[str, list[Any]], model: FraudModel, snapshots: Snapshots
) -> tuple[dict[str, np.ndarray], list[int | None], np.ndarray, list[str]]:
    features, as_of = payment_features(payments, snapshots)
    scores = model.score(features)
    return features, as_of, scores, model.actions(scores).tolist()


def _cell(rng: random.Random, value: str) -> str:
    return "" if rng.random() < 0.12 else value


def _snapshot_csv(seed: int) -> bytes:
    rng = random.Random(seed)  # noqa: S311 - test data, not cryptography
    lines = ["customer_id,valid_from,home_country,avg_amount_30d,txn_count_30d,chargebacks_365d,account_age_days"]
    for c in range(40):  # customers 40..49 have no snapshot at all
        for _ in range(rng.choice([1, 1, 2, 3, 4])):
            lines.append(",".join([
                f"c{c}", str(rng.choice(TIMES[2:])), _cell(rng, rng.choice(["GB", "US", "DE", "NA"])),
                _cell(rng, rng.choice([f"{rng.uniform(0, 9000):.6f}", repr(rng.uniform(0, 9000)), "0.5", "0"])),
                _cell(rng, f"{rng.randint(0, 40):.6f}"), _cell(rng, str(rng.choice([0, 0, 1, 3]))),
                _cell(rng, repr(rng.uniform(0, 3000))),
            ]))  # fmt: skip
    lines.append(f"c7,{TIMES[5]},FR,100.000000,1.000000,0.000000,5.000000")  # one customer, one valid_from,
    lines.append(f"c7,{TIMES[5]},GB,900.000000,9.000000,2.000000,50.000000")  # twice: the later row counts
    rng.shuffle(lines[1:])
    return ("\n".join(lines) + "\n").encode()


def _payments(count: int, seed: int) -> dict[str, list[Any]]:
    rng = random.Random(seed)  # noqa: S311 - test data, not cryptography
    times = [rng.choice(TIMES) + rng.choice([0, 0, 0, -1, 1, 1_800_000]) for _ in range(count)]
    return {
        "payment_id": [f"p{n}" for n in range(count)], "event_id": [f"e{n}" for n in range(count)],
        "customer_id": [f"c{rng.randrange(50)}" for _ in range(count)],
        "amount_minor": [rng.choice([0, 1, 99, rng.randrange(10**7), 2**40]) for _ in range(count)],
        "country": [rng.choice(["GB", "US", "DE", "NA", "FR"]) for _ in range(count)],
        "card_present": [rng.random() < 0.5 for _ in range(count)], "event_time": times,
    }  # fmt: skip


def _assert_bit_identical(
    got: tuple[dict[str, np.ndarray], list[int | None], np.ndarray, list[str]],
    want: tuple[dict[str, np.ndarray], list[int | None], np.ndarray, list[str]],
) -> None:
    for name in FEATURES:
        assert got[0][name].dtype == np.float64
        assert got[0][name].view(np.int64).tolist() == want[0][name].view(np.int64).tolist(), name
    assert got[1] == want[1]
    assert got[2].view(np.int64).tolist() == want[2].view(np.int64).tolist()
    assert got[3] == want[3]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_numpy_path_scores_generated_edges_as_the_pandas_path_did(seed: int) -> None:
    snapshots, payments = Snapshots(_snapshot_csv(seed)), _payments(3000, seed)
    model = FraudModel.load()
    want = _scored_with_pandas(payments, model, snapshots)
    _assert_bit_identical(_scored(payments, model, snapshots), want)
    # the edges happened: no snapshot, a snapshot from the event's own millisecond, empty cells
    as_of, times = want[1], payments["event_time"]
    assert as_of.count(None) > 100 and sum(a == t for a, t in zip(as_of, times, strict=True)) > 50
    assert any(np.isnan(v) for v in pd.read_csv(io.BytesIO(snapshots.data))["avg_amount_30d"])
    duplicate = [n for n, (c, t) in enumerate(zip(payments["customer_id"], times, strict=True))
                 if c == "c7" and t >= TIMES[5] and as_of[n] == TIMES[5]]  # fmt: skip
    assert duplicate, "a payment must join the customer's two snapshots of one millisecond"

    scores = want[2]  # thresholds at scores that occur: ties are decided the same way
    tied = dataclasses.replace(model, review_at=float(scores[10]), hold_at=float(scores[20]))
    tie = _scored_with_pandas(payments, tied, snapshots)
    _assert_bit_identical(_scored(payments, tied, snapshots), tie)
    assert {"review", "hold"} <= {tie[3][10], tie[3][20]} or scores[10] >= scores[20]


def test_the_shipped_snapshots_score_as_the_pandas_path_did() -> None:
    from demo.payments_simulation import simulate

    world = simulate(5, payments=4000).payments
    payments = {name: world[name].tolist() for name in ("customer_id", "amount_minor", "country", "card_present",
                                                        "event_time")}  # fmt: skip
    model, snapshots = FraudModel.load(), load_snapshots()
    want = _scored_with_pandas(payments, model, snapshots)
    _assert_bit_identical(_scored(payments, model, snapshots), want)
    assert set(want[3]) == {"approve", "review", "hold"}


def test_the_decision_step_does_not_import_pandas() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from spark_jobs.model.fraud_model import FraudModel, ModelSource, MODEL_PATH, FEATURES_PATH; "
        "import spark_jobs.infer.fraud_decisions, spark_jobs.infer.job; "
        "source, model, snapshots = ModelSource.of(MODEL_PATH, FEATURES_PATH); "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # the driver reads the model and hashes the snapshots without pandas

"""The fraud model and the decisions it makes (pure: numpy, and pandas on the training side)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from demo.payments_simulation import DAY_MS, START_MS, payment_records, simulate
from demo.train_model import train_on_world
from ikkai.contract.codec import default_codec
from spark_jobs.infer.fraud_decisions import Topics, decide
from spark_jobs.model.fraud_model import (
    FEATURES,
    MODEL_PATH,
    FraudModel,
    ModelError,
    canonical_json,
    load_snapshots,
)
from spark_jobs.model.training import as_of_snapshots, feature_frame, fit_artifact


def test_features_are_read_as_of_the_event_time_never_latest() -> None:
    snapshots = pd.DataFrame({
        "customer_id": ["c1", "c1", "c1"], "valid_from": [100, 200, 300], "home_country": ["DE", "DE", "FR"],
        "avg_amount_30d": [10.0, 20.0, 30.0], "txn_count_30d": [1.0, 2.0, 3.0], "chargebacks_365d": [0.0, 0.0, 5.0],
        "account_age_days": [1.0, 2.0, 3.0],
    })  # fmt: skip
    payments = pd.DataFrame({"customer_id": ["c1", "c1", "c1", "c2"], "event_time": [250, 99, 200, 500]})
    joined = as_of_snapshots(payments, snapshots)
    assert list(joined["avg_amount_30d"].fillna(-1)) == [20.0, -1, 20.0, -1]  # 300 is "latest" but after 250
    assert list(joined["features_as_of"].fillna(-1)) == [200, -1, 200, -1]


def test_the_shipped_model_is_the_one_training_produces() -> None:
    artifact, _, auc = train_on_world(json.loads(MODEL_PATH.read_bytes())["training"]["seed"])
    assert artifact == MODEL_PATH.read_bytes()  # same seed, same bytes, same model_version
    assert auc > 0.7


@pytest.mark.parametrize("shuffle", [1, 2, 3, 4, 5])
def test_the_artifact_does_not_depend_on_the_order_sums_run_in(shuffle: int) -> None:
    """Another machine's BLAS sums in another order; shuffling the training rows does the same here."""
    world = simulate(7, customers=400, payments=20_000)
    features = feature_frame(as_of_snapshots(world.payments, world.snapshots))[list(FEATURES)]
    labels = world.payments["is_fraud"].to_numpy()
    cut = int(len(features) * 0.8)  # the training rows; the held-out rest keeps its place
    order = np.concatenate([np.random.default_rng(shuffle).permutation(cut), np.arange(cut, len(features))])
    shuffled = fit_artifact(features.iloc[order].reset_index(drop=True), labels[order], seed=7)
    assert canonical_json(shuffled) == canonical_json(fit_artifact(features, labels, seed=7))


def test_the_model_beats_chance_on_fresh_data() -> None:
    world = simulate(99, payments=5000)
    model = FraudModel.load()
    scores = model.score(feature_frame(as_of_snapshots(world.payments, world.snapshots)))
    assert roc_auc_score(world.payments["is_fraud"], scores) > 0.7


def test_model_version_is_the_content_hash() -> None:
    data = MODEL_PATH.read_bytes()
    changed = json.loads(data)
    changed["thresholds"]["hold"] = 0.9
    other = FraudModel.from_bytes(json.dumps(changed, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    assert FraudModel.from_bytes(data).version != other.version
    with pytest.raises(ModelError, match="not a fraud model artifact"):
        FraudModel.from_bytes(b"{}")


def _source_rows(count: int) -> pd.DataFrame:
    codec = default_codec()
    records = payment_records(simulate(5, payments=count).payments)
    return pd.DataFrame({
        "key": [str(r["payment_id"]).encode() for r in records],
        "value": [codec.encode("payment_event", r, version=1) for r in records],
        "topic": "events.payments", "partition": [i % 2 for i in range(count)], "offset": range(count),
    })  # fmt: skip


def test_decisions_do_not_depend_on_how_rows_are_chunked() -> None:
    rows, model, snapshots, codec = _source_rows(300), FraudModel.load(), load_snapshots(), default_codec()
    whole = decide(rows, model, snapshots, codec, Topics())
    chunks = pd.concat([decide(rows.iloc[i : i + 7], model, snapshots, codec, Topics()) for i in range(0, 300, 7)])
    assert whole.reset_index(drop=True).equals(chunks.reset_index(drop=True))


def test_a_record_that_does_not_decode_goes_to_the_dlq() -> None:
    rows = _source_rows(3)
    rows.loc[1, "value"] = b'{"payment_id": "json is not allowed here"}'
    out = decide(rows, FraudModel.load(), load_snapshots(), default_codec(), Topics())
    assert list(out["topic"]).count("dlq.infer") == 1
    letter = default_codec().decode("dead_letter", out[out["topic"] == "dlq.infer"]["value"].iloc[0])
    assert (letter["source_offset"], letter["error_class"], letter["value"]) == (1, "SchemaError", rows.loc[1, "value"])
    assert list(out["topic"]).count("decisions.fraud") == 2


def test_simulated_events_span_the_snapshots() -> None:
    times = simulate(1, payments=500).payments["event_time"]
    assert times.min() < START_MS < times.max() and times.max() > START_MS + 7 * DAY_MS


def test_the_jobs_function_carries_paths_and_hashes_never_the_model_or_snapshots() -> None:
    import functools

    from pyspark import cloudpickle

    from spark_jobs.infer.fraud_decisions import decide_arrow_batches
    from spark_jobs.model.fraud_model import FEATURES_PATH, ModelSource

    source, model, snapshots = ModelSource.of(MODEL_PATH, FEATURES_PATH)
    shipped = cloudpickle.dumps(functools.partial(decide_arrow_batches, source=source, topics=Topics()))
    assert len(shipped) < 2_000 < len(cloudpickle.dumps(snapshots))
    assert (source.model_path, source.features_path, source.version) == (None, None, model.version)
    assert model.version.startswith(source.model_version + "-")  # the artifact's version, then the snapshots
    loaded = cloudpickle.loads(cloudpickle.dumps(source)).load()
    assert loaded is source.load()  # read once per worker, then kept
    assert loaded[1] == snapshots


def test_a_worker_that_finds_other_snapshots_than_the_driver_stops(tmp_path: Any) -> None:
    from spark_jobs.model.fraud_model import FEATURES_PATH, ModelSource

    copy = tmp_path / "customer_features.csv"
    copy.write_bytes(FEATURES_PATH.read_bytes())
    source, _, _ = ModelSource.of(MODEL_PATH, copy)
    copy.write_bytes(FEATURES_PATH.read_bytes().replace(b"GB", b"FR", 1))  # the executor's file differs
    with pytest.raises(ModelError, match="differ from the driver's snapshots"):
        source.load()

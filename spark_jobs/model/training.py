"""Train the fraud model on labeled payments and write the artifact + the feature snapshots.

``train(payments, snapshots, seed)`` takes labeled payments (the columns of ``fraud_model.FEATURES``'
sources plus ``is_fraud``) and the customer feature snapshots, and returns the artifact and the
snapshots as they ship. The shipped model is trained on the demo's simulated world:
``python -m demo.train_model [--seed 7] [--out DIR]`` (default: the shipped ``artifacts/fraud/``).

scikit-learn fits a standardized logistic regression; the artifact is
canonical JSON (no pickle: loading it runs no code), and its sha-256 is the model version.

The same seed gives the same bytes on every machine. Two machines' BLAS and CPUs sum floating
point in different orders, so the raw fit differs in the last digits from one machine to the
next; the fit therefore runs to a tight tolerance (so it stops at the optimum, not at whichever
iterate a rounding difference led to) and every number is stored at ``SIGNIFICANT_DIGITS``
significant digits. The model scores with the stored numbers, so what is shipped is exactly what
decides. The snapshots the model was trained with are written next to it as
``customer_features.csv``: the infer job joins them as of each payment's event time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from spark_jobs.model.fraud_model import FEATURES, FraudModel, canonical_json

SIGNIFICANT_DIGITS = 8  # far above the model's accuracy, far below the last-digit noise between machines
_TOLERANCE = 1e-12  # the fit stops this close to the optimum, whatever the summation order


def stored(value: float) -> float:
    """A fitted number as the artifact stores it: ``SIGNIFICANT_DIGITS`` significant digits."""
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def as_of_snapshots(payments: pd.DataFrame, snapshots: pd.DataFrame) -> pd.DataFrame:
    """``payments`` (same row order) with each customer's latest snapshot whose valid_from <= event_time.

    Never "latest": a snapshot that starts after the event is invisible to it. ``features_as_of``
    is that snapshot's valid_from, or NaN when the customer had none yet. The scoring side joins
    the same rows with numpy (``fraud_model.Snapshots.as_of``).
    """
    left = payments.assign(_row=np.arange(len(payments)), _t=payments["event_time"].astype("int64"))
    right = snapshots.rename(columns={"valid_from": "features_as_of"})
    right = right.assign(_t=right["features_as_of"].astype("int64")).sort_values(["_t", "customer_id"], kind="stable")
    joined = pd.merge_asof(
        left.sort_values(["_t", "_row"], kind="stable"), right, on="_t", by="customer_id", direction="backward"
    )
    return joined.sort_values("_row", kind="stable").drop(columns=["_row", "_t"]).reset_index(drop=True)


def feature_frame(joined: pd.DataFrame) -> pd.DataFrame:
    """The model's inputs from payments joined with their as-of snapshot, as the scoring side computes them
    (``fraud_model.payment_features``, bit for bit)."""
    amount = joined["amount_minor"].astype(np.float64)
    habit = joined["avg_amount_30d"].astype(np.float64).fillna(amount)
    hour = (joined["event_time"].astype("int64") // 3_600_000) % 24
    home = joined["home_country"].where(joined["home_country"].notna(), joined["country"])
    return pd.DataFrame({
        "log_amount": np.log1p(amount),
        "amount_ratio": amount / np.maximum(habit, 1.0),
        "foreign": (joined["country"] != home).astype(np.float64),
        "card_not_present": (~joined["card_present"].astype(bool)).astype(np.float64),
        "night": (hour < 5).astype(np.float64),
        "chargebacks_365d": joined["chargebacks_365d"].astype(np.float64).fillna(0.0),
        "log_txn_count_30d": np.log1p(joined["txn_count_30d"].astype(np.float64).fillna(0.0)),
        "log_account_age_days": np.log1p(joined["account_age_days"].astype(np.float64).fillna(0.0)),
    })  # fmt: skip


def fit_artifact(features: pd.DataFrame, labels: np.ndarray, seed: int) -> dict[str, Any]:
    """The artifact document of a standardized logistic regression (the first 80% train, the rest is held out)."""
    cut = int(len(features) * 0.8)
    scaler = StandardScaler().fit(features.iloc[:cut])
    fitted = LogisticRegression(max_iter=10_000, tol=_TOLERANCE).fit(
        scaler.transform(features.iloc[:cut]), labels[:cut]
    )
    return {
        "kind": "logistic-regression",
        "features": list(FEATURES),
        "mean": [stored(x) for x in scaler.mean_],
        "scale": [stored(x) for x in scaler.scale_],
        "coef": [stored(x) for x in fitted.coef_[0]],
        "intercept": stored(fitted.intercept_[0]),
        "thresholds": {"review": 0.5, "hold": 0.8},
        "training": {"seed": seed, "samples": cut, "sklearn": sklearn.__version__},
    }


def train(payments: pd.DataFrame, snapshots: pd.DataFrame, seed: int) -> tuple[bytes, bytes, float]:
    """(artifact bytes, snapshots CSV bytes, holdout AUC) for labeled ``payments`` in time order."""
    features = feature_frame(as_of_snapshots(payments, snapshots))[list(FEATURES)]
    labels = payments["is_fraud"].to_numpy()
    doc = fit_artifact(features, labels, seed)
    cut = doc["training"]["samples"]
    model = FraudModel.from_bytes(canonical_json(doc))
    auc = float(roc_auc_score(labels[cut:], model.score(features.iloc[cut:])))
    doc["training"]["holdout_auc"] = round(auc, 4)
    shipped = snapshots.to_csv(index=False, float_format="%.6f").encode()
    return canonical_json(doc), shipped, auc

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

from spark_jobs.model.fraud_model import (
    FEATURES,
    FraudModel,
    as_of_snapshots,
    canonical_json,
    feature_frame,
)

SIGNIFICANT_DIGITS = 8  # far above the model's accuracy, far below the last-digit noise between machines
_TOLERANCE = 1e-12  # the fit stops this close to the optimum, whatever the summation order


def stored(value: float) -> float:
    """A fitted number as the artifact stores it: ``SIGNIFICANT_DIGITS`` significant digits."""
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


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

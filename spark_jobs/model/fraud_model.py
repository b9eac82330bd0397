"""The fraud model: point-in-time features and a versioned, deterministic scorer (pure pandas/numpy).

The artifact (``spark_jobs/model/artifacts/fraud/model.json``, shipped inside this package and
written by ``python -m demo.train_model`` through ``spark_jobs.model.training``) is a
logistic regression trained by scikit-learn: feature names, standardization, weights and the
action thresholds, as canonical JSON. Its version is the sha-256 of those bytes, so a retrained
or edited model is a different version, and the same bytes always score the same.

What decides a decision is the artifact *and* the feature snapshots it joins: the job decides with
the ``deciding_version`` of both (the artifact's version and a digest of the artifact's and the
snapshots' bytes), which every decision carries as ``model_version`` and its id is derived from,
and which the markers record as the query's writer version: a corrected snapshot row is a new
version and a cut, like a retrained model.

Scoring accumulates feature by feature in a fixed order, element-wise, so a row's score does
not depend on which other rows share its batch (no reductions whose order varies with size).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ikkai.contract.markers import deciding_version as writer_version
from ikkai.errors import IkkaiError
from ikkai.resources import package_path

ARTIFACTS = package_path("spark_jobs.model", "artifacts", "fraud")  # a real folder, even from the submit zip
MODEL_PATH = ARTIFACTS / "model.json"
FEATURES_PATH = ARTIFACTS / "customer_features.csv"
FEATURES = (
    "log_amount", "amount_ratio", "foreign", "card_not_present", "night", "chargebacks_365d", "log_txn_count_30d",
    "log_account_age_days",
)  # fmt: skip


class ModelError(IkkaiError):
    def __init__(self, path: str, problem: str, fix: str) -> None:
        super().__init__(f"model {path}: {problem}", fix=fix)
        self.path = path


def canonical_json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def artifact_version(data: bytes) -> str:
    """The version of the artifact ``data``: ``fraud-lr-`` and 16 hex digits of its sha-256."""
    return "fraud-lr-" + hashlib.sha256(data).hexdigest()[:16]


def deciding_version(artifact: bytes, snapshots: bytes) -> str:
    """What decides infer's output, as its writer version and every decision's ``model_version``: the artifact's
    version and a digest of the artifact's and the snapshots' bytes (the thresholds are in the artifact)."""
    return writer_version(artifact_version(artifact), artifact, snapshots)


@dataclass(frozen=True)
class FraudModel:
    version: str  # the artifact's (from_bytes); the job's model carries the deciding version (ModelSource.load)
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    review_at: float
    hold_at: float

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> FraudModel:
        try:
            doc = json.loads(data)
            model = cls(
                version=artifact_version(data),
                features=tuple(doc["features"]),
                mean=tuple(doc["mean"]),
                scale=tuple(doc["scale"]),
                coef=tuple(doc["coef"]),
                intercept=float(doc["intercept"]),
                review_at=float(doc["thresholds"]["review"]),
                hold_at=float(doc["thresholds"]["hold"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelError(
                source, f"not a fraud model artifact: {exc}", fix="retrain: `python -m demo.train_model`"
            ) from exc
        if model.features != FEATURES:
            raise ModelError(source, f"expects features {model.features}", fix=f"this code computes {FEATURES}")
        return model

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> FraudModel:
        if not path.is_file():
            raise ModelError(str(path), "missing", fix="run `python -m demo.train_model`")
        return cls.from_bytes(path.read_bytes(), str(path))

    def score(self, features: pd.DataFrame) -> np.ndarray:
        z = np.full(len(features), self.intercept, dtype=np.float64)
        for name, mean, scale, weight in zip(self.features, self.mean, self.scale, self.coef, strict=True):
            z = z + weight * ((features[name].to_numpy(dtype=np.float64) - mean) / scale)
        return np.asarray(1.0 / (1.0 + np.exp(-z)))

    def actions(self, scores: np.ndarray) -> np.ndarray:
        return np.where(scores >= self.hold_at, "hold", np.where(scores >= self.review_at, "review", "approve"))


def as_of_snapshots(payments: pd.DataFrame, snapshots: pd.DataFrame) -> pd.DataFrame:
    """``payments`` (same row order) with each customer's latest snapshot whose valid_from <= event_time.

    Never "latest": a snapshot that starts after the event is invisible to it, so a replay a
    month later joins exactly what the first run joined. ``features_as_of`` is that snapshot's
    valid_from, or NaN when the customer had none yet.
    """
    left = payments.assign(_row=np.arange(len(payments)), _t=payments["event_time"].astype("int64"))
    right = snapshots.rename(columns={"valid_from": "features_as_of"})
    right = right.assign(_t=right["features_as_of"].astype("int64")).sort_values(["_t", "customer_id"], kind="stable")
    joined = pd.merge_asof(
        left.sort_values(["_t", "_row"], kind="stable"), right, on="_t", by="customer_id", direction="backward"
    )
    return joined.sort_values("_row", kind="stable").drop(columns=["_row", "_t"]).reset_index(drop=True)


def feature_frame(joined: pd.DataFrame) -> pd.DataFrame:
    """The model's inputs from payments joined with their as-of snapshot."""
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


def load_snapshots(path: Path = FEATURES_PATH) -> pd.DataFrame:
    return _snapshots_from_bytes(_snapshot_bytes(path))


def _snapshot_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise ModelError(str(path), "feature snapshots missing", fix="run `python -m demo.train_model`")
    return path.read_bytes()


def _snapshots_from_bytes(data: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(data), dtype={"customer_id": str, "home_country": str, "valid_from": "int64"})


@dataclass(frozen=True)
class ModelSource:
    """Where a Python worker finds the model and its feature snapshots, and which version it must find there.

    This is what the job's function carries to every task: two paths and a version, not the model
    and the snapshots, which each Python worker reads once and keeps (``load``). The worker checks
    that it read the driver's bytes (the deciding version, which covers both files): a different
    file on an executor stops the job rather than score with other features (rule 4).
    """

    model_path: str | None  # None: the artifact shipped in this package (MODEL_PATH wherever it is imported)
    features_path: str | None  # None: the shipped snapshots (FEATURES_PATH)
    model_version: str  # the artifact's version alone
    version: str  # deciding_version(artifact, snapshots): what the decisions carry and the markers record

    @classmethod
    def of(cls, model_path: Path, features_path: Path) -> tuple[ModelSource, FraudModel, pd.DataFrame]:
        """The source for these paths (as given to the job), and the model (carrying the deciding version) and
        snapshots read from them."""
        source = cls(
            None if model_path == MODEL_PATH else str(model_path),
            None if features_path == FEATURES_PATH else str(features_path), "", "",
        )  # fmt: skip
        model, snapshots, version = source._read()
        return (
            cls(source.model_path, source.features_path, model.version, version),
            _deciding(model, version),
            snapshots,
        )

    def files(self) -> tuple[Path, Path]:
        """The artifact and the snapshots, where this process finds them."""
        from ikkai.resources import shipped_path

        model = MODEL_PATH if self.model_path is None else shipped_path(self.model_path)
        return model, FEATURES_PATH if self.features_path is None else shipped_path(self.features_path)

    def _read(self) -> tuple[FraudModel, pd.DataFrame, str]:
        model_file, features_file = self.files()
        model = FraudModel.load(model_file)
        data = _snapshot_bytes(features_file)
        return model, _snapshots_from_bytes(data), deciding_version(model_file.read_bytes(), data)

    def load(self) -> tuple[FraudModel, pd.DataFrame]:
        """The model (carrying the deciding version) and snapshots, read once per process and checked against the
        version the driver read."""
        if self not in _loaded:
            model, snapshots, version = self._read()
            where = self.model_path or str(MODEL_PATH)
            if model.version != self.model_version:
                raise ModelError(where, f"is {model.version} here, {self.model_version} on the driver",
                                 fix="ship the same model file to every executor (--files)")  # fmt: skip
            if version != self.version:
                raise ModelError(self.features_path or str(FEATURES_PATH), "differ from the driver's snapshots",
                                 fix="ship the same feature snapshots to every executor (--files)")  # fmt: skip
            while len(_loaded) >= LOADED_SOURCES:  # a long-lived worker that saw several models keeps the newest
                del _loaded[next(iter(_loaded))]
            _loaded[self] = (_deciding(model, version), snapshots)
        return _loaded[self]


def _deciding(model: FraudModel, version: str) -> FraudModel:
    return dataclasses.replace(model, version=version)


LOADED_SOURCES = 8  # per Python worker: a replay across several recorded versions keeps each of them
_loaded: dict[ModelSource, tuple[FraudModel, pd.DataFrame]] = {}

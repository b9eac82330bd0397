"""The fraud model: point-in-time features and a versioned, deterministic scorer (pure numpy).

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

The scoring side has no pandas: the snapshots are parsed once per process (``Snapshots``, the one
place pandas is imported, lazily, so that a CSV cell reads as it always did), joined as of event time
and turned into features with numpy arrays (``payment_features``). Training's pandas path
(``training.as_of_snapshots``, ``training.feature_frame``) computes the same numbers; a test holds
the two bit for bit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

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

    def score(self, features: Mapping[str, Any]) -> np.ndarray:
        """Each row's score from its features (name -> one value per row: numpy arrays, or a DataFrame's columns)."""
        count = len(np.asarray(features[self.features[0]])) if self.features else 0
        z = np.full(count, self.intercept, dtype=np.float64)
        for name, mean, scale, weight in zip(self.features, self.mean, self.scale, self.coef, strict=True):
            z = z + weight * ((np.asarray(features[name], dtype=np.float64) - mean) / scale)
        return np.asarray(1.0 / (1.0 + np.exp(-z)))

    def actions(self, scores: np.ndarray) -> np.ndarray:
        return np.where(scores >= self.hold_at, "hold", np.where(scores >= self.review_at, "review", "approve"))


SNAPSHOT_COLUMNS = (
    "customer_id", "valid_from", "home_country", "avg_amount_30d", "txn_count_30d", "chargebacks_365d",
    "account_age_days",
)  # fmt: skip
SNAPSHOT_TYPES = {"customer_id": str, "home_country": str, "valid_from": "int64"}  # as pandas reads the CSV
_NUMBERS = ("avg_amount_30d", "txn_count_30d", "chargebacks_365d", "account_age_days")


@dataclass(frozen=True)
class _Sorted:
    """The snapshot rows by (customer, valid_from), file order among equals: what the as-of join searches."""

    codes: dict[str, int]  # customer id -> its number (ids in sorted order)
    keys: np.ndarray  # int64: customer number * (times + 1) + rank of valid_from among the distinct times
    times: np.ndarray  # int64: the distinct valid_from values, ascending
    customer: np.ndarray  # int64: each row's customer number
    valid_from: np.ndarray  # int64
    home_country: np.ndarray  # object: str, or None where the cell is empty
    has_home: np.ndarray  # bool: a home country is given
    numbers: dict[str, np.ndarray]  # float64, NaN where the cell is empty


@dataclass(frozen=True)
class Snapshots:
    """The customer feature snapshots: the CSV's bytes, parsed on first use (``rows``) and kept.

    The driver only hashes the bytes (``deciding_version``), so it never parses them; a Python
    worker parses them once per process. pandas reads the cells (imported here, lazily): a cell
    reads exactly as the artifact's CSV always read (``NA`` is missing, floats by pandas' parser).
    """

    data: bytes

    def __len__(self) -> int:
        return len(self.rows.valid_from)

    @cached_property
    def rows(self) -> _Sorted:
        import pandas as pd

        frame = pd.read_csv(io.BytesIO(self.data), dtype=SNAPSHOT_TYPES)
        ids = frame["customer_id"].tolist()
        codes = {c: n for n, c in enumerate(sorted({c for c in ids if isinstance(c, str)}))}
        customer = np.fromiter((codes.get(c, -1) if isinstance(c, str) else -1 for c in ids), np.int64, len(ids))
        valid_from = frame["valid_from"].to_numpy(dtype=np.int64)
        order = np.lexsort((valid_from, customer))  # stable: file order among equal (customer, valid_from)
        times = np.unique(valid_from)
        rank = np.searchsorted(times, valid_from[order], side="right")
        home = np.asarray([c if isinstance(c, str) else None for c in frame["home_country"].tolist()], dtype=object)
        return _Sorted(
            codes=codes, keys=customer[order] * (len(times) + 1) + rank, times=times, customer=customer[order],
            valid_from=valid_from[order], home_country=home[order],
            has_home=np.asarray([c is not None for c in home[order]], dtype=bool),
            numbers={name: frame[name].to_numpy(dtype=np.float64)[order] for name in _NUMBERS},
        )  # fmt: skip

    def as_of(self, customers: Sequence[str], event_times: np.ndarray) -> np.ndarray:
        """For each payment, the row (in ``rows``) of its customer's latest snapshot with valid_from <= event_time.

        -1 where the customer had none yet. Never "latest": a snapshot that starts after the event
        is invisible to it, so a replay a month later joins exactly what the first run joined. Of
        several snapshots of one customer with the same valid_from, the last in the file.
        """
        rows = self.rows
        code = np.fromiter((rows.codes.get(c, -1) for c in customers), np.int64, len(customers))
        key = code * (len(rows.times) + 1) + np.searchsorted(rows.times, event_times, side="right")
        at = np.searchsorted(rows.keys, key, side="right") - 1
        found = (code >= 0) & (at >= 0)
        found[found] = rows.customer[at[found]] == code[found]
        return np.where(found, at, -1)


def payment_features(
    payments: Mapping[str, Sequence[Any]], snapshots: Snapshots
) -> tuple[dict[str, np.ndarray], list[int | None]]:
    """The model's inputs for payments (field -> one value per payment) and each one's ``features_as_of``.

    ``features_as_of`` is the valid_from of the snapshot joined (``Snapshots.as_of``), None
    without one; a missing snapshot or an empty cell counts as the payment's own amount and
    country, and zero counts.
    """
    event_time = np.asarray(payments["event_time"], dtype=np.int64)
    at = snapshots.as_of(payments["customer_id"], event_time)
    found, rows = at >= 0, snapshots.rows
    safe = np.where(found, at, 0)

    def number(name: str) -> np.ndarray:
        column = rows.numbers[name]
        return np.where(found, column[safe], np.nan) if len(column) else np.full(len(at), np.nan)

    def zero_if_missing(name: str) -> np.ndarray:
        values = number(name)
        return np.where(np.isnan(values), 0.0, values)

    amount = np.asarray(payments["amount_minor"], dtype=np.int64).astype(np.float64)
    habit = number("avg_amount_30d")
    habit = np.where(np.isnan(habit), amount, habit)
    hour = (event_time // 3_600_000) % 24
    country = np.asarray(payments["country"], dtype=object)
    home = np.where(found & rows.has_home[safe], rows.home_country[safe], country) if len(rows.has_home) else country
    features = {
        "log_amount": np.log1p(amount),
        "amount_ratio": amount / np.maximum(habit, 1.0),
        "foreign": np.asarray(country != home, dtype=bool).astype(np.float64),
        "card_not_present": np.logical_not(np.asarray(payments["card_present"], dtype=bool)).astype(np.float64),
        "night": (hour < 5).astype(np.float64),
        "chargebacks_365d": zero_if_missing("chargebacks_365d"),
        "log_txn_count_30d": np.log1p(zero_if_missing("txn_count_30d")),
        "log_account_age_days": np.log1p(zero_if_missing("account_age_days")),
    }  # fmt: skip
    as_of = [int(t) if ok else None for t, ok in zip(rows.valid_from[safe].tolist(), found.tolist(), strict=True)]
    return features, as_of


def load_snapshots(path: Path = FEATURES_PATH) -> Snapshots:
    return Snapshots(_snapshot_bytes(path))


def _snapshot_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise ModelError(str(path), "feature snapshots missing", fix="run `python -m demo.train_model`")
    data = path.read_bytes()
    header = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip().split(",")
    missing = [name for name in SNAPSHOT_COLUMNS if name not in header]
    if missing:
        header_line = ",".join(SNAPSHOT_COLUMNS)
        raise ModelError(str(path), f"feature snapshots without the columns {missing}",
                         fix=f"a CSV with the header {header_line}: `python -m demo.train_model`")  # fmt: skip
    return data


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
    def of(cls, model_path: Path, features_path: Path) -> tuple[ModelSource, FraudModel, Snapshots]:
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

    def _read(self) -> tuple[FraudModel, Snapshots, str]:
        model_file, features_file = self.files()
        model = FraudModel.load(model_file)
        data = _snapshot_bytes(features_file)
        return model, Snapshots(data), deciding_version(model_file.read_bytes(), data)

    def load(self) -> tuple[FraudModel, Snapshots]:
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
_loaded: dict[ModelSource, tuple[FraudModel, Snapshots]] = {}

"""An IkkaiError crosses processes as itself: pickled and loaded, the same class, fields and one-line message."""

from __future__ import annotations

import pickle
import re

import pytest
from pyspark import cloudpickle  # type: ignore[attr-defined]

from ikkai.errors import ConfigError, IkkaiError, KafkaAccessError, PrerequisiteError
from spark_jobs.sink.commit_markers import CommitMarkerError

ERRORS = [
    IkkaiError("plain", fix="do this"),
    ConfigError("values/dev.yaml", "db_host", "undefined", fix="define it"),
    PrerequisiteError("java", "not found", fix="install Java 17"),
    KafkaAccessError("localhost:9092", "tls", "alice (SASL_SSL)", "certificate unknown", fix="trust the CA"),
    CommitMarkerError("_ikkai.commits.infer", "batch 3: partitions [1] were written by two tasks", fix="report it"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_an_error_pickled_and_loaded_is_the_same_error(error: IkkaiError, dumps: object) -> None:
    loaded = pickle.loads(dumps(error))  # type: ignore[operator]  # noqa: S301 - our own bytes
    assert type(loaded) is type(error)
    assert str(loaded) == str(error)
    assert loaded.__dict__ == error.__dict__
    with pytest.raises(type(error), match="^" + re.escape(str(error))):
        raise loaded

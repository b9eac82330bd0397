"""The cut's pure parts: the deciding version, the ranges a marker records, the store of past versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from ikkai.contract.markers import CommitMarker, VersionCut, recorded_versions
from ikkai.errors import ConfigError
from spark_jobs.infer.recorded_cut import recorded_cut
from spark_jobs.model.fraud_model import FEATURES_PATH, MODEL_PATH, ModelSource, deciding_version
from spark_jobs.model.model_store import keep, stored


def marker(partition: int, committed: int, version: str, *cuts: VersionCut) -> CommitMarker:
    return CommitMarker(
        "ikkai", "infer", partition, 9, 2, 1, "events.payments", {partition: committed}, writer_version=version,
        cuts=cuts,
    )  # fmt: skip


def test_the_deciding_version_covers_the_artifact_and_every_snapshot_byte() -> None:
    """Mutation: the snapshots left out of the digest (a corrected row would decide under the same version)."""
    artifact, snapshots = MODEL_PATH.read_bytes(), FEATURES_PATH.read_bytes()
    version = deciding_version(artifact, snapshots)
    corrected = snapshots.replace(b",0.000000,28.000000", b",3.000000,28.000000", 1)
    assert corrected != snapshots
    assert deciding_version(artifact, corrected) != version
    assert deciding_version(artifact.replace(b'"hold":0.8', b'"hold":0.7'), snapshots) != version  # a threshold
    assert version == deciding_version(artifact, snapshots)


def test_a_marker_records_each_version_from_the_offset_it_took_over_and_the_running_one_after_it() -> None:
    cuts = (VersionCut("v1", 0, {}), VersionCut("v2", 4, {1: 40}))
    assert recorded_versions(marker(1, 70, "v2", *cuts), 1, "v3") == ((0, "v1"), (40, "v2"), (70, "v3"))
    assert recorded_versions(marker(1, 70, "v2", *cuts), 1, "v2") == ((0, "v1"), (40, "v2"))
    assert recorded_versions(None, 1, "v3") == ((0, "v3"),)  # nothing committed: the running version decides all
    idle = (*cuts, VersionCut("v3", 6, {1: 70}), VersionCut("v4", 7, {1: 70}))  # v3 decided nothing
    assert recorded_versions(marker(1, 70, "v4", *idle), 1, "v4") == ((0, "v1"), (40, "v2"), (70, "v4"))
    started = marker(1, 90, "v1", VersionCut("v1", 0, {1: 59}))  # --start-offsets 1:59
    assert recorded_versions(started, 1, "v1") == ((0, "v1"),)
    recreated = (*cuts, VersionCut("v3", 8, {}))  # the input recreated, then decided from 0 by v3
    assert recorded_versions(marker(1, 30, "v3", *recreated), 1, "v3") == ((0, "v3"),)


def test_a_replay_finds_each_recorded_version_in_the_store_and_runs_rows_by_version(tmp_path: Path) -> None:
    shipped, _, _ = ModelSource.of(MODEL_PATH, FEATURES_PATH)
    edited = tmp_path / "customer_features.csv"
    edited.write_bytes(FEATURES_PATH.read_bytes() + b"cust-99999,1767225600000,GB,1.0,1.0,0.0,1.0\n")
    current, _, _ = ModelSource.of(MODEL_PATH, edited)
    store = tmp_path / "store"
    keep(store, shipped)
    assert stored(store, shipped.version) == ModelSource(
        str(store / shipped.version / "model.json"), str(store / shipped.version / "customer_features.csv"),
        shipped.model_version, shipped.version,
    )  # fmt: skip
    markers = {
        0: marker(0, 50, current.version, VersionCut(shipped.version, 0, {}), VersionCut(current.version, 3, {0: 20}))
    }
    cut = recorded_cut(markers, current, 2, store, "infer")
    old = stored(store, shipped.version)
    assert cut.runs([0, 0, 1, 0, 0], [18, 19, 5, 20, 21]) == [(0, 2, old), (2, 5, current)]
    assert cut.versions == tuple(sorted((shipped.version, current.version)))
    assert old is not None and old.load()[0].version == shipped.version


def test_a_replay_over_a_version_the_store_lacks_is_refused_in_one_line_naming_it(tmp_path: Path) -> None:
    current, _, _ = ModelSource.of(MODEL_PATH, FEATURES_PATH)
    markers = {
        1: marker(1, 50, current.version, VersionCut("fraud-lr-gone", 0, {}), VersionCut(current.version, 3, {1: 20}))
    }
    with pytest.raises(ConfigError) as refused:
        recorded_cut(markers, current, 2, tmp_path / "store", "infer")
    line = str(refused.value)
    assert "\n" not in line and "fraud-lr-gone" in line and "offsets 0 to 19" in line
    assert str(tmp_path / "store" / "fraud-lr-gone") in line


def test_a_stored_copy_that_is_not_its_version_is_never_used(tmp_path: Path) -> None:
    source, _, _ = ModelSource.of(MODEL_PATH, FEATURES_PATH)
    folder = keep(tmp_path, source)
    (folder / "customer_features.csv").write_bytes(b"customer_id,valid_from\n")
    assert stored(tmp_path, source.version) is None
    keep(tmp_path, source)  # kept again: the damaged copy is set aside
    assert stored(tmp_path, source.version) is not None

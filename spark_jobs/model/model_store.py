"""The model store: every version a query decided with, kept by its deciding version, for a replay to find.

A replay reproduces the recorded cutover: each input offset range is decided by the version its live
marker's cuts name (``spark_jobs.infer.recorded_cut``), so the replay needs the artifacts and snapshots
of past versions, not only today's. The live infer job keeps its own in the store before it decides
anything (``keep``)::

    <store>/<deciding version>/model.json
    <store>/<deciding version>/customer_features.csv

The store is content-addressed: the folder's name is the ``deciding_version`` of the two files, and a
version is found (``stored``) only when the files read back to that name, so a damaged or edited copy is
never used to decide. The default is ``$IKKAI_HOME/models`` (``--model-store``); it is created 0700 and
refused unless only this user can write it (rule 11). On a cluster every executor must reach it at the
same path (a shared folder), as the checkpoint.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ikkai.private_folders import private_folder
from spark_jobs.model.fraud_model import ModelSource, artifact_version, deciding_version

MODEL_FILE, FEATURES_FILE = "model.json", "customer_features.csv"


def store_folder(store: Path) -> Path:
    """``store``, created 0700; refused unless it is a folder of this user that nobody else can write."""
    return private_folder(store, "--model-store", "a replay decides with the versions it finds there")


def keep(store: Path, source: ModelSource) -> Path:
    """Keep ``source``'s artifact and snapshots under their version in ``store`` (once); the version's folder.

    Written whole or not at all (staged, then renamed); a folder already holding this version is left as it is,
    and one holding other bytes under this name is replaced.
    """
    folder = store_folder(store) / source.version
    if stored(store, source.version) is not None:
        return folder
    model_file, features_file = source.files()
    staged = store / f".{source.version}.{os.getpid()}"
    staged.mkdir(mode=0o700, exist_ok=True)
    (staged / MODEL_FILE).write_bytes(model_file.read_bytes())
    (staged / FEATURES_FILE).write_bytes(features_file.read_bytes())
    if folder.exists():  # not this version's bytes (stored() said so): set aside, never decided with
        folder.rename(store / f".{source.version}.damaged.{os.getpid()}")
    try:
        staged.rename(folder)
    except OSError:  # another job kept the same version at the same moment: its copy holds the same bytes
        shutil.rmtree(staged, ignore_errors=True)
        if stored(store, source.version) is None:
            raise
    return folder


def stored(store: Path, version: str) -> ModelSource | None:
    """The source of ``version`` in ``store``, or None when it is not there or its files are not that version."""
    folder = store / version
    model_file, features_file = folder / MODEL_FILE, folder / FEATURES_FILE
    if not (model_file.is_file() and features_file.is_file()):
        return None
    artifact = model_file.read_bytes()
    if deciding_version(artifact, features_file.read_bytes()) != version:
        return None
    return ModelSource(str(model_file), str(features_file), artifact_version(artifact), version)

"""A replay's recorded cut: which model version decides each input offset range, as the live query's markers say.

A live query that changed its model recorded each change in its markers (``VersionCut``: the version and,
per input partition, the first offset it decided). A replay of that query (``spark_jobs.replay_query``)
reads the live query's markers when it starts and decides each input offset range with the version that
decided it live, found in the model store by its version (``spark_jobs.model.model_store``); the rest,
from the offsets the live query has committed on, with the live query's own version, which decides them
live too. So the replay writes the live decisions byte for byte, each range by its version.

A version the store does not hold is refused in one line before the replay writes anything, naming the
version, the offsets it decided and where to put it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ikkai.contract.markers import CommitMarker, recorded_versions
from ikkai.errors import ConfigError
from spark_jobs.model.fraud_model import ModelSource
from spark_jobs.model.model_store import stored


@dataclass(frozen=True)
class RecordedCut:
    """Per input partition, the sources that decide it from each first offset on (ascending, the first from 0)."""

    ranges: tuple[tuple[int, tuple[tuple[int, ModelSource], ...]], ...]

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(sorted({source.version for _, rs in self.ranges for _, source in rs}))

    def source_at(self, partition: int, offset: int) -> ModelSource:
        """The source that decides ``offset`` of input ``partition``. Pure."""
        ranges = dict(self.ranges)[partition]
        return ranges[bisect.bisect_right([first for first, _ in ranges], offset) - 1][1]

    def runs(self, partitions: Sequence[int], offsets: Sequence[int]) -> list[tuple[int, int, ModelSource]]:
        """``(start, end, source)`` of each run of consecutive rows one source decides, in row order. Pure."""
        runs: list[tuple[int, int, ModelSource]] = []
        for row, (partition, offset) in enumerate(zip(partitions, offsets, strict=True)):
            source = self.source_at(partition, offset)
            if runs and runs[-1][2] == source:
                runs[-1] = (runs[-1][0], row + 1, source)
            else:
                runs.append((row, row + 1, source))
        return runs


def recorded_cut(
    markers: Mapping[int, CommitMarker], current: ModelSource, partitions: int, store: Path, live_query: str
) -> RecordedCut:
    """The live query's cut, each version's source found in ``store``; a version missing there is refused.

    Output partition p holds the decisions of input partition p (infer writes in place), so p's marker says
    which versions decided input partition p. ``current`` decides what the live query has not committed.
    """
    ranges = []
    for partition in range(partitions):
        versions = recorded_versions(markers.get(partition), partition, current.version)
        sources = []
        for index, (first, version) in enumerate(versions):
            source = current if version == current.version else stored(store, version)
            if source is None:
                end = f"to {versions[index + 1][0] - 1}" if index + 1 < len(versions) else "on"
                raise ConfigError(
                    f"replay of query {live_query}", "--model-store",
                    f"input partition {partition}, offsets {first} {end}, were decided by {version} (its markers' "
                    f"cut), which {store} does not hold",
                    fix=f"put that version's model.json and customer_features.csv in {store / version}/ (the live "
                    "job keeps every version it runs with there), then ask for the replay again",
                )  # fmt: skip
            sources.append((first, source))
        ranges.append((partition, tuple(sources)))
    return RecordedCut(tuple(ranges))

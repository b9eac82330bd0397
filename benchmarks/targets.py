"""The speed targets a benchmark prints with its tables: each with its limit, the measured value, met or not, and why.

A target not met stays "not met" with the measured reason; a target that could not be measured in the run
says so ("not measured") instead of passing silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.harness import print_table

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"


@dataclass(frozen=True)
class Target:
    """``what`` must be at most (``at_most``) or at least ``limit``, in ``unit``."""

    what: str
    limit: float
    at_most: bool
    unit: str = ""

    @property
    def limit_text(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.limit:,g}{' ' + self.unit if self.unit else ''}"


def verdict(target: Target, measured: float | None) -> str:
    """``met``, ``not met``, or ``not measured`` when the run gave no value."""
    if measured is None:
        return NOT_MEASURED
    return MET if (measured <= target.limit if target.at_most else measured >= target.limit) else NOT_MET


def target_rows(measured: Sequence[tuple[Target, float | None, str]]) -> list[list[object]]:
    """One row per (target, measured value, what it was measured as): what, limit, value, verdict, how."""
    return [[t.what, t.limit_text, value, verdict(t, value), how] for t, value, how in measured]


def print_targets(title: str, measured: Sequence[tuple[Target, float | None, str]]) -> None:
    print_table(title, ["TARGET", "LIMIT", "MEASURED", "", "MEASURED AS"], target_rows(measured))

"""The decision step per event: pandas (merge_asof, a feature DataFrame) against numpy arrays, side by side.

    python -m benchmarks.decision_step [--events 10000] [--rounds 7]

Both paths score the same chunk of simulated payments against the shipped snapshots: the
pandas one as infer ran it (``training.as_of_snapshots``, ``training.feature_frame``, the
payments as a DataFrame), the numpy one as it runs now (``fraud_model.payment_features``). Rounds
alternate old and new, so a neighbour's load falls on both; the table gives µs per event (the
median round) and the ratio. A second table: what importing pandas costs a process that did not
need it (the driver's start before the decision step dropped it), in fresh interpreters.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from demo.payments_simulation import simulate
from spark_jobs.model.fraud_model import SNAPSHOT_TYPES, FraudModel, Snapshots, load_snapshots, payment_features

FIELDS = ("customer_id", "amount_minor", "country", "card_present", "event_time")


def pandas_step(payments: dict[str, list[Any]], model: FraudModel, snapshots: Any) -> tuple[np.ndarray, list[Any]]:
    import pandas as pd

    from spark_jobs.model.training import as_of_snapshots, feature_frame

    joined = as_of_snapshots(pd.DataFrame(payments), snapshots)
    scores = model.score(feature_frame(joined))
    as_of = [None if pd.isna(t) else int(t) for t in joined["features_as_of"].tolist()]
    return model.actions(scores), as_of


def numpy_step(payments: dict[str, list[Any]], model: FraudModel, snapshots: Snapshots) -> tuple[np.ndarray, list[Any]]:
    features, as_of = payment_features(payments, snapshots)
    return model.actions(model.score(features)), as_of


def _per_event_us(step: Callable[[], Any], events: int) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) / events * 1e6


def _fresh_import_s(code: str, times: int) -> float:
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        spent.append(time.perf_counter() - start)
    return statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import pandas as pd

    world = simulate(5, payments=args.events).payments
    payments = {name: world[name].tolist() for name in FIELDS}
    model, snapshots = FraudModel.load(), load_snapshots()
    frame = pd.read_csv(io.BytesIO(snapshots.data), dtype=SNAPSHOT_TYPES)
    old_out, new_out = pandas_step(payments, model, frame), numpy_step(payments, model, snapshots)
    assert old_out[0].tolist() == new_out[0].tolist() and old_out[1] == new_out[1], "the two paths must agree"
    old: list[float] = []
    new: list[float] = []
    for _ in range(args.rounds):
        old.append(_per_event_us(lambda: pandas_step(payments, model, frame), args.events))
        new.append(_per_event_us(lambda: numpy_step(payments, model, snapshots), args.events))
    o, n = statistics.median(old), statistics.median(new)
    print(f"decision step, {args.events} events a chunk, {args.rounds} alternating rounds (median)")
    print(f"{'path':<28}{'µs/event':>10}")
    print(f"{'pandas (merge_asof)':<28}{o:>10.2f}")
    print(f"{'numpy arrays':<28}{n:>10.2f}")
    print(f"{'new / old':<28}{n / o:>10.2f}")
    bare = _fresh_import_s("import numpy, pyarrow", 3)
    with_pandas = _fresh_import_s("import numpy, pyarrow, pandas", 3)
    print(f"\n{'fresh interpreter':<28}{'s':>10}")
    print(f"{'numpy + pyarrow':<28}{bare:>10.2f}")
    print(f"{'numpy + pyarrow + pandas':<28}{with_pandas:>10.2f}")


if __name__ == "__main__":
    main()

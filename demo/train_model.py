"""Train the shipped fraud model on the simulated world and write it to ``spark_jobs/model/artifacts/fraud/``.

    python -m demo.train_model [--seed 7] [--out spark_jobs/model/artifacts/fraud]

The world (``payments_simulation``) is the only labeled data the repository has; the training
itself (``spark_jobs.model.training``) takes any labeled payments. Prints the new model version.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from demo.payments_simulation import simulate
from spark_jobs.model.fraud_model import MODEL_PATH, deciding_version
from spark_jobs.model.training import train


def train_on_world(seed: int) -> tuple[bytes, bytes, float]:
    """The shipped model's training: a 400-customer, 20,000-payment world of ``seed``."""
    world = simulate(seed, customers=400, payments=20_000)
    return train(world.payments, world.snapshots, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=MODEL_PATH.parent)  # the artifact folder inside the package
    args = parser.parse_args(argv)
    artifact, snapshots, auc = train_on_world(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model.json").write_bytes(artifact)
    (args.out / "customer_features.csv").write_bytes(snapshots)
    version = deciding_version(artifact, snapshots)  # what the decisions of this model and snapshots carry
    sys.stderr.write(f"holdout AUC {auc:.3f}; wrote {args.out}/model.json\n")
    sys.stdout.write(version + "\n")
    return 0 if np.isfinite(auc) else 1


if __name__ == "__main__":
    sys.exit(main())

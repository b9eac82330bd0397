"""How long the command line takes to reach a command: each command's module imported when it runs (today)
against every module imported first (as ``cli/app.py`` did before). ``ikkai jobs run`` goes through this on
every job start before it execs the job, and the test suite starts a few hundred jobs.

Each round runs ``ikkai jobs --help`` as a fresh process both ways, alternating (A B A B ...); the table gives
the median wall time of each and their ratio. Tables only; nothing here asserts anything about time.

Usage: .venv/bin/python -m benchmarks.cli_start [--rounds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from benchmarks.harness import alternating, median, print_table

LAZY = "import sys; from cli import main; sys.argv = ['ikkai', 'jobs', '--help']; main()"
EAGER = (
    "import importlib, sys; from cli.app import COMMANDS; from cli import main; "
    "[importlib.import_module(module) for module, _ in COMMANDS.values()]; "
    "sys.argv = ['ikkai', 'jobs', '--help']; main()"
)
VARIANTS = {"per command (today)": LAZY, "every module first": EAGER}


def wall_s(code: str) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    rounds = parser.parse_args().rounds
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _, name in alternating(list(VARIANTS), rounds):
        times[name].append(wall_s(VARIANTS[name]))
    medians = {name: median(values) or 0.0 for name, values in times.items()}
    baseline = medians["every module first"]
    rows = [[name, f"{m:.3f}", f"{m / baseline:.2f}" if baseline else "-"] for name, m in medians.items()]
    print_table(f"`ikkai jobs --help`, {rounds} rounds", ["imports", "median s", "ratio"], rows)


if __name__ == "__main__":
    main()

"""Benchmark scripts: `python benchmarks/<name>.py` prints a table (see BENCHMARKS.md)."""

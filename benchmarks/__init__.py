"""Benchmark scripts: `python -m benchmarks.<name>` (from the checkout) prints a table (see BENCHMARKS.md)."""

"""Benchmark scripts, run as modules from the repository root: `python -m benchmarks.<name>` (see RESULTS.md)."""

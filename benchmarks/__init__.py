"""Benchmarks: run all with `python -m benchmarks.run`; results in benchmarks/RESULTS.md."""

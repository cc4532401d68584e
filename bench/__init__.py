"""Benchmarks (run from the repository root, e.g. ``python bench/trainer_bench.py``)."""

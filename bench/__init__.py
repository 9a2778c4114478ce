"""Benchmarks of the service, each a module run from the repository root: `python -m bench.<name>` (`bench.run_all`
runs them all); bench/common.py says what they share."""

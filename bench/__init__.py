"""Benchmarks: each measures a target and a floor in the same run, interleaved."""

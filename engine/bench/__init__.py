"""Benchmarks: speed and acceptance measured in one run against plain decoding."""

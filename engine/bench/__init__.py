"""Benchmarks: speed and acceptance measured in one run against plain decoding, drafter call
times, the kernel probe; the prompt sets and corpora they and training read; the provenance
every published number carries; tables, plots and where results go.

Never imports torch, PySide6 or fastapi, nor training, speedup, server or commands.
"""

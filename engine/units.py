"""Byte counts as text, one rule for the engine's messages and the app's labels."""

from __future__ import annotations


def format_size(n_bytes: float) -> str:
    """Decimal units, as download pages and file managers show sizes: 1.23 GB, 456 MB,
    12.3 MB, 0.013 MB (memory statistics of small drafters stay readable)."""
    if n_bytes >= 1e9:
        return f"{n_bytes / 1e9:.2f} GB"
    mb = n_bytes / 1e6
    if mb >= 100:
        return f"{mb:.0f} MB"
    if mb >= 0.1:
        return f"{mb:.1f} MB"
    return f"{mb:.3f} MB"

"""Small text formatters shared by the chat view, the stats panel and exports."""

from __future__ import annotations

MIB = 2**20

STOP_REASONS = {
    "eos": "",
    "stop": "stop string",
    "length": "max tokens",
    "context": "context full",
    "cancelled": "stopped",
}


def fmt_mb(n_bytes: float) -> str:
    mb = n_bytes / MIB
    if mb >= 100:
        return f"{mb:.0f} MB"
    if mb >= 0.1:
        return f"{mb:.1f} MB"
    return f"{mb:.3f} MB"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def footer_line(stats: dict) -> str:
    """One line under a finished answer: tokens, tok/s, tau, TTFT (and why it stopped)."""
    parts = [
        f"{stats.get('tokens', 0)} tokens",
        f"{stats.get('tokens_per_s', 0.0):.1f} tok/s",
        f"τ {stats.get('tau_mean', 0.0):.2f}",
        f"TTFT {fmt_ms(stats.get('ttft_s', 0.0))}",
    ]
    reason = STOP_REASONS.get(stats.get("stop_reason", ""), stats.get("stop_reason", ""))
    if reason:
        parts.append(reason)
    return "  ·  ".join(parts)

"""Small text formatters shared by the chat view, the stats panel and exports.

Byte counts use engine.units.format_size, the one rule for sizes in the engine and the app.
"""

from __future__ import annotations

STOP_REASONS = {
    "eos": "",
    "stop": "stop string",
    "length": "max tokens",
    "context": "context full",
    "cancelled": "stopped",
}

# What to do when an answer failed because the chat outgrew the model's context.
CONTEXT_HINT = (
    "The conversation no longer fits the model's context. Start a new chat, edit the message "
    "shorter, or raise the context length in Settings."
)


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

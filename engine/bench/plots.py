"""PNG plots of benchmark results (matplotlib, the [dev] extra; headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_acceptance(result: dict, out: Path) -> list[Path]:
    """Per drafter: P(at least k drafts accepted) per slot at the largest block, and tau
    against the block size."""
    plt = pyplot()
    rows = result["rows"]
    labels = list(dict.fromkeys(r["drafter"] for r in rows))
    blocks = sorted({r["block"] for r in rows})
    paths = []

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for label in labels:
        r = next(r for r in rows if r["drafter"] == label and r["block"] == blocks[-1])
        hist = np.asarray(r["accepted_histogram"], dtype=float)
        at_least = hist[::-1].cumsum()[::-1][1:] / hist.sum()  # P(accepted >= k), k = 1..
        ax.plot(np.arange(1, len(at_least) + 1), at_least, marker="o", ms=3, label=label)
    ax.set(
        xlabel="draft slot k",
        ylabel="P(slots 1..k accepted)",
        ylim=(0, 1),
        title=f"Acceptance per slot, block {blocks[-1]}",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(out / "acceptance_per_slot.png")
    fig.tight_layout()
    fig.savefig(paths[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        taus = [
            next(r["tau"] for r in rows if r["drafter"] == label and r["block"] == b)
            for b in blocks
        ]
        ax.bar(np.arange(len(blocks)) + i * width, taus, width, label=label)
    ax.set_xticks(np.arange(len(blocks)) + 0.4 - width / 2, [f"B={b}" for b in blocks])
    ax.set(ylabel="tau (tokens per target decode)", title="Mean acceptance length")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    paths.append(out / "tau_by_block.png")
    fig.tight_layout()
    fig.savefig(paths[-1])
    plt.close(fig)
    return paths


def plot_cost_curve(result: dict, out: Path) -> Path:
    """T(B)/T(1) measured here against the memory-bound ideal (1) and pure compute (B)."""
    plt = pyplot()
    sizes = np.array([int(b) for b in result["cost_ratio"]])
    ratio = np.array([result["cost_ratio"][k] for k in result["cost_ratio"]])
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    ax.plot(sizes, ratio, marker="o", ms=3, label="measured T(B)/T(1)")
    ax.plot(sizes, sizes, ls="--", color="grey", label="compute-bound (B)")
    ax.plot(sizes, np.ones_like(sizes), ls=":", color="grey", label="memory-bound (1)")
    ax.set(
        xlabel="tokens verified in one target decode (B)",
        ylabel="time / 1-token decode",
        title="Verify cost on this machine",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    path = out / "cost_curve.png"
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_context(result: dict, out: Path) -> list[Path]:
    """Per drafter, against the mean context length of each answers file: tau at the largest
    block, and the draft-side memory that context needed."""
    plt = pyplot()
    rows = result["rows"]
    block = max(r["block"] for r in rows)
    paths = []
    for key, ylabel, name, scale in (
        ("tau", f"tau at B={block}", "tau_vs_context.png", 1.0),
        ("memory_bytes_max", "draft memory (KiB)", "memory_vs_context.png", 1 / 1024),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
        for r in (r for r in rows if r["block"] == block):
            points = sorted(
                (v["context_tokens_mean"], v[key] * scale) for v in r["per_file"].values()
            )
            ax.plot(*zip(*points, strict=True), marker="o", ms=4, label=r["drafter"])
        ax.set(xlabel="context tokens (mean per answers file)", ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
        paths.append(out / name)
        fig.tight_layout()
        fig.savefig(paths[-1])
        plt.close(fig)
    return paths

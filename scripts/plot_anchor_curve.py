"""The learning curve of scripts/qwen_curve.sh: walked tau against training anchors.

Reads the acceptance.json its walk wrote (drafters labelled "<N> anchors", beside n-gram
lookup and the shipped drafter), draws tau per block size against anchors on a log-2 axis
with the two references as dashed lines, and prints the table RESULTS quotes with the gain
per doubling of anchors between each pair of points.
Usage: .venv/bin/python scripts/plot_anchor_curve.py ACCEPTANCE_JSON OUT_PNG
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

from engine.bench.plots import pyplot

SUFFIX = " anchors"


def curve(rows: list[dict]) -> tuple[list[int], dict[int, dict[str, float]]]:
    """(anchor counts, {block: {drafter label: tau}})."""
    taus: dict[int, dict[str, float]] = {}
    for r in rows:
        taus.setdefault(r["block"], {})[r["drafter"]] = r["tau"]
    anchors = sorted(
        {int(r["drafter"].removesuffix(SUFFIX)) for r in rows if r["drafter"].endswith(SUFFIX)}
    )
    return anchors, taus


def plot(anchors: list[int], taus: dict[int, dict[str, float]], out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for i, (block, tau) in enumerate(sorted(taus.items())):
        color = f"C{i}"
        ax.plot(
            anchors,
            [tau[f"{a}{SUFFIX}"] for a in anchors],
            marker="o",
            color=color,
            label=f"HyFlash, B={block}",
        )
        for ref, style in (("ngram", ":"), ("HyFlash (shipped)", "--")):
            if ref in tau:
                ax.axhline(tau[ref], color=color, ls=style, lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(anchors, [f"{a / 1e3:.0f}K" for a in anchors])
    ax.minorticks_off()
    ax.set(
        xlabel="training anchors (log 2)",
        ylabel="walked tau (72 held-out answers)",
        title="Qwen2.5-Coder-0.5B: dashed = shipped drafter, dotted = n-gram",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def table(anchors: list[int], taus: dict[int, dict[str, float]]) -> str:
    blocks = sorted(taus)
    head = "| drafter | " + " | ".join(f"tau B={b}" for b in blocks) + " |"
    lines = [head, "|---" * (len(blocks) + 1) + "|"]
    for name in ("ngram", "HyFlash (shipped)", *(f"{a}{SUFFIX}" for a in anchors)):
        if all(name in taus[b] for b in blocks):
            lines.append(f"| {name} | " + " | ".join(f"{taus[b][name]:.2f}" for b in blocks) + " |")
    lines += [
        "",
        "| anchors | " + " | ".join(f"gain per doubling, B={b}" for b in blocks) + " |",
        "|---" * (len(blocks) + 1) + "|",
    ]
    for lo, hi in itertools.pairwise(anchors):
        doublings = math.log2(hi / lo)
        gains = [(taus[b][f"{hi}{SUFFIX}"] - taus[b][f"{lo}{SUFFIX}"]) / doublings for b in blocks]
        lines.append(
            f"| {lo / 1e3:.0f}K -> {hi / 1e3:.0f}K | "
            + " | ".join(f"{g:+.3f}" for g in gains)
            + " |"
        )
    return "\n".join(lines)


def main() -> int:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    anchors, taus = curve(json.loads(src.read_text())["rows"])
    plot(anchors, taus, out)
    print(table(anchors, taus))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learning curves of scripts/learning_curves.sh: walked tau per axis, one panel each.

Reads the acceptance.json that the script's `hyflash acceptance` call wrote and draws tau at
one block size against the data (answers), the capacity and the features / slot variants,
with n-gram lookup as the floor; prints the markdown table RESULTS quotes.
Usage: .venv/bin/python scripts/plot_learning_curves.py ACCEPTANCE_JSON OUT_PNG [BLOCK]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.bench.plots import pyplot

BASE_ANSWERS = 150  # the base variant's --max-answers (scripts/learning_curves.sh)
AXES = {
    "capacity": ["base", "layers-2", "d576"],
    "features and slots": ["base", "fused", "causal"],
}


def tau_at(rows: list[dict], block: int) -> dict[str, float]:
    return {r["drafter"]: r["tau"] for r in rows if r["block"] == block}


def data_points(tau: dict[str, float]) -> list[tuple[int, float]]:
    points = [(BASE_ANSWERS, tau["base"])] if "base" in tau else []
    points += [(int(k.removeprefix("data-")), v) for k, v in tau.items() if k.startswith("data-")]
    return sorted(points)


def plot(tau: dict[str, float], block: int, out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), dpi=110, sharey=True)
    data = data_points(tau)
    axes[0].plot([x for x, _ in data], [y for _, y in data], marker="o")
    axes[0].set(xscale="log", xlabel="self-distilled answers (log)", title="data")
    axes[0].set_xticks([x for x, _ in data], [str(x) for x, _ in data])
    axes[0].minorticks_off()
    for ax, (title, names) in zip(axes[1:], AXES.items(), strict=True):
        names = [n for n in names if n in tau]
        ax.bar(names, [tau[n] for n in names])
        ax.set(title=title)
    for ax in axes:
        if "ngram" in tau:
            ax.axhline(tau["ngram"], color="gray", ls="--", label="n-gram")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set(ylabel=f"walked tau, B={block}")
    axes[0].legend()
    low = min(tau.values())
    axes[0].set_ylim(low - 0.1, max(tau.values()) + 0.1)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def table(rows: list[dict]) -> str:
    blocks = sorted({r["block"] for r in rows})
    names = list(dict.fromkeys(r["drafter"] for r in rows))
    lines = [
        "| variant | " + " | ".join(f"tau B={b}" for b in blocks) + " | drafter ms (B=4) |",
        "|---" * (len(blocks) + 2) + "|",
    ]
    for name in names:
        by_block = {r["block"]: r for r in rows if r["drafter"] == name}
        taus = " | ".join(f"{by_block[b]['tau']:.2f}" for b in blocks)
        lines.append(f"| {name} | {taus} | {by_block[blocks[0]]['drafter_ms']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    block = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    rows = json.loads(src.read_text())["rows"]
    plot(tau_at(rows, block), block, out)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

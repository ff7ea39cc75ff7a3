"""Live decoding stats: why the answer is fast (acceptance), how fast, and what memory it uses.

Plots are painted with QPainter (no plotting library); colours come from app.theme at paint
time so light/dark switches need only a repaint.
"""

from __future__ import annotations

import html
import math
from itertools import accumulate

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app import theme
from app.format import fmt_ms
from engine.events import StepStats
from engine.units import format_size

MAX_PLOT_STEPS = 400  # keep the last N steps on the tau plot


class TauPlot(QWidget):
    """Committed tokens per step (bars) and the running mean tau (line)."""

    def __init__(self) -> None:
        super().__init__()
        self.setMinimumHeight(100)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # it fills its rect with the card's colour itself, so an update repaints only the plot,
        # not the card's styled frame behind it (the plot repaints with every stats update)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.committed: list[int] = []
        self.blocks: list[int] = []

    def clear(self) -> None:
        self.committed.clear()
        self.blocks.clear()
        self.update()

    def add(self, steps: list[tuple[int, int]]) -> None:
        for committed, block in steps:
            self.committed.append(committed)
            self.blocks.append(block)
        del self.committed[:-MAX_PLOT_STEPS]
        del self.blocks[:-MAX_PLOT_STEPS]
        self.update()

    def paintEvent(self, _event) -> None:  # noqa: N802
        c = theme.colors()
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(c.surface))
        rect = QRectF(self.rect()).adjusted(26, 6, -4, -16)
        top = max(4, max(self.committed, default=0), max(self.blocks, default=0))
        p.setPen(QColor(c.muted))
        font = p.font()
        font.setPointSizeF(max(font.pointSizeF() - 2, 6))
        p.setFont(font)
        grid = QPen(QColor(c.border))
        grid.setStyle(Qt.PenStyle.DashLine)
        for value in sorted({1, (top + 1) // 2, top}):
            y = rect.bottom() - (value / top) * rect.height()
            p.setPen(grid)
            p.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
            p.setPen(QColor(c.muted))
            p.drawText(QRectF(0, y - 8, 22, 16), Qt.AlignmentFlag.AlignRight, str(value))
        n = len(self.committed)
        p.drawText(
            QRectF(rect.left(), rect.bottom() + 2, rect.width(), 14),
            Qt.AlignmentFlag.AlignLeft,
            "steps →" if n else "waiting for an answer…",
        )
        if not n:
            return
        width = rect.width() / max(n, 30)
        scale = rect.height() / top
        left, bottom = rect.left(), rect.bottom()
        # bars: committed tokens per step, in one call and without antialiasing (axis-aligned
        # rectangles look the same; antialiased, 400 of them cost ~1 ms a repaint)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(c.plot_bar))
        bar_w = max(width - 1, 1)
        p.drawRects(
            [
                QRectF(left + i * width, bottom - value * scale, bar_w, value * scale)
                for i, value in enumerate(self.committed)
            ]
        )
        # line: running mean, at most one point per pixel (the plot repaints with every update)
        stride = max(1, math.ceil(1 / width))
        means = [total / (i + 1) for i, total in enumerate(accumulate(self.committed))]
        last = [n - 1] if (n - 1) % stride else []
        points = [
            QPointF(left + (i + 0.5) * width, bottom - means[i] * scale)
            for i in [*range(0, n, stride), *last]
        ]
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pen = QPen(QColor(c.plot_line))
        pen.setWidthF(2.0)
        p.setPen(pen)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawPolyline(points)


class SlotHistogram(QWidget):
    """Acceptance rate per draft slot: accepted / verified, with the slot number below."""

    def __init__(self) -> None:
        super().__init__()
        self.setMinimumHeight(84)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)  # as TauPlot
        self.accept: list[int] = []
        self.propose: list[int] = []

    def set_counts(self, accept: list[int], propose: list[int]) -> None:
        if accept == self.accept and propose == self.propose:
            return  # no repaint for the same counts (updates come several times a second)
        self.accept, self.propose = list(accept), list(propose)
        self.update()

    def rates(self) -> list[float]:
        return [a / p if p else 0.0 for a, p in zip(self.accept, self.propose, strict=False)]

    def paintEvent(self, _event) -> None:  # noqa: N802
        c = theme.colors()
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(c.surface))
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = p.font()
        font.setPointSizeF(max(font.pointSizeF() - 2, 6))
        p.setFont(font)
        rect = QRectF(self.rect()).adjusted(4, 14, -4, -14)
        if not self.propose:
            p.setPen(QColor(c.muted))
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, "no drafts verified yet")
            return
        used = len(self.propose)  # the engine reports one count per possible slot
        rates = self.rates() + [0.0] * used
        slot_w = rect.width() / used
        p.setPen(QColor(c.border))
        p.drawLine(QPointF(rect.left(), rect.bottom()), QPointF(rect.right(), rect.bottom()))
        if not any(self.propose):
            p.setPen(QColor(c.muted))
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, "no drafts verified yet")
        for i in range(used):
            rate = rates[i]
            verified = self.propose[i] if i < len(self.propose) else 0
            x = rect.left() + i * slot_w + slot_w * 0.15
            h = rate * rect.height()
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(c.good if verified else c.border))
            p.drawRoundedRect(QRectF(x, rect.bottom() - h, slot_w * 0.7, h), 2, 2)
            p.setPen(QColor(c.muted))
            label_box = QRectF(rect.left() + i * slot_w, rect.bottom() + 1, slot_w, 12)
            p.drawText(label_box, Qt.AlignmentFlag.AlignHCenter, str(i + 1))
            if verified and slot_w >= 22:
                p.drawText(
                    QRectF(rect.left() + i * slot_w, rect.bottom() - h - 13, slot_w, 12),
                    Qt.AlignmentFlag.AlignHCenter,
                    f"{rate * 100:.0f}%",
                )


class Tile(QFrame):
    def __init__(self, label: str, tip: str) -> None:
        super().__init__()
        self.setObjectName("Tile")
        self.setToolTip(tip)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(0)
        self.value = QLabel("–")
        self.value.setObjectName("TileValue")
        self.label = QLabel(label)
        self.label.setObjectName("TileLabel")
        layout.addWidget(self.value)
        layout.addWidget(self.label)

    def set(self, text: str) -> None:
        self.value.setText(text)


class MemoryBar(QWidget):
    def __init__(self, label: str, level: str = "") -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(3)
        row = QHBoxLayout()
        self.name = QLabel(label)
        self.value = QLabel("–")
        self.value.setObjectName("Muted")
        row.addWidget(self.name)
        row.addStretch(1)
        row.addWidget(self.value)
        layout.addLayout(row)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setRange(0, 1000)
        self._shown: tuple[int, int, str] | None = None  # what set() last showed
        if level:
            self.bar.setProperty("level", level)
        layout.addWidget(self.bar)

    def set(self, used: int, budget: int, suffix: str = "") -> None:
        if (used, budget, suffix) == self._shown:
            return
        self._shown = (used, budget, suffix)
        self.value.setText(f"{format_size(used)} / {format_size(budget)}{suffix}")
        self.bar.setValue(int(1000 * min(used / budget, 1.0)) if budget else 0)
        # a sliver stays visible for tiny but non-zero use (the n-gram drafter's few KB)
        if used and self.bar.value() == 0:
            self.bar.setValue(4)


class StatsPanel(QScrollArea):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("StatsPanel")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        body.setObjectName("StatsPanel")
        col = QVBoxLayout(body)
        col.setContentsMargins(14, 14, 14, 14)
        col.setSpacing(8)

        self.setMinimumWidth(320)
        title = QLabel("Live decoding")
        title.setObjectName("StatsTitle")
        self.state = QLabel("idle")
        self.state.setObjectName("Muted")
        head = QHBoxLayout()
        head.addWidget(title)
        head.addStretch(1)
        head.addWidget(self.state)
        col.addLayout(head)

        tiles = QGridLayout()
        tiles.setSpacing(6)
        self.tau_step = Tile("τ this step", "Tokens committed by the last verify step")
        self.tau_mean = Tile("τ mean", "Acceptance length: mean tokens per target decode")
        self.speed = Tile("tokens / s", "Decode speed since the first token")
        self.ttft = Tile("time to first token", "From sending to the first answer token")
        self.block = Tile(
            "block size, last step", "Tokens verified in the last step (auto = chosen per step)"
        )
        self.tokens = Tile("tokens", "Tokens in this answer")
        for i, tile in enumerate(
            (self.tau_step, self.tau_mean, self.speed, self.ttft, self.block, self.tokens)
        ):
            tiles.addWidget(tile, i // 2, i % 2)
        col.addLayout(tiles)

        col.addWidget(self._section("ACCEPTANCE LENGTH τ PER STEP"))
        self.plot = TauPlot()
        col.addWidget(self._card(self.plot))
        legend = QLabel("bars: tokens committed per step · line: running mean")
        legend.setObjectName("Muted")
        legend.setWordWrap(True)
        col.addWidget(legend)

        col.addWidget(self._section("ACCEPTANCE PER DRAFT SLOT"))
        self.histogram = SlotHistogram()
        col.addWidget(self._card(self.histogram))

        col.addWidget(self._section("MEMORY"))
        self.kv_bar = MemoryBar("Target KV cache")
        self.draft_bar = MemoryBar("Drafter state", level="drafter")
        self.draft_bar.setToolTip(
            "Draft-side memory (window K/V, recurrent state, n-gram index), drawn against "
            "the same budget as the target's KV cache (its allocation)"
        )
        self.kv_bar.setToolTip("KV cache in use, against the KV cache allocated for the context")
        mem = QVBoxLayout()
        mem.setSpacing(8)
        mem.addWidget(self.kv_bar)
        mem.addWidget(self.draft_bar)
        col.addWidget(self._card_layout(mem))

        col.addWidget(self._section("ENGINE"))
        self.engine_label = QLabel("–")
        self.engine_label.setWordWrap(True)
        self.engine_label.setTextFormat(Qt.TextFormat.RichText)
        col.addWidget(self._card(self.engine_label))
        self.tint_legend = QLabel()
        self.tint_legend.setObjectName("Muted")
        self.tint_legend.setWordWrap(True)
        col.addWidget(self.tint_legend)
        col.addStretch(1)
        self.setWidget(body)
        self.latest: StepStats | None = None
        self._engine: tuple | None = None
        self.refresh_theme()

    @staticmethod
    def _section(text: str) -> QLabel:
        label = QLabel(text)
        label.setObjectName("Section")
        return label

    @staticmethod
    def _card(widget: QWidget) -> QFrame:
        layout = QVBoxLayout()
        layout.addWidget(widget)
        return StatsPanel._card_layout(layout)

    @staticmethod
    def _card_layout(layout) -> QFrame:
        frame = QFrame()
        frame.setObjectName("Card")
        layout.setContentsMargins(10, 8, 10, 8)
        frame.setLayout(layout)
        return frame

    # ----- updates ----------------------------------------------------------------------------

    def refresh_theme(self) -> None:
        tint = theme.colors().tint
        self.tint_legend.setText(
            f"<span style='background:{tint}'>&nbsp;tinted&nbsp;</span> text: draft tokens "
            "the model accepted"
        )
        self.plot.update()
        self.histogram.update()
        if self._engine is not None:  # its muted colour follows the theme
            self.set_engine(*self._engine)

    def start_answer(self) -> None:
        self.latest = None
        self.plot.clear()
        self.histogram.set_counts([], [])
        for tile in (self.tau_step, self.tau_mean, self.speed, self.ttft, self.tokens):
            tile.set("–")
        self.state.setText("prefill…")

    def update_steps(self, steps: list[tuple[int, int]], latest: StepStats) -> None:
        self.latest = latest
        self.plot.add(steps)
        self.histogram.set_counts(latest.slot_accept_counts, latest.slot_propose_counts)
        self.tau_step.set(str(latest.committed))
        self.tau_mean.set(f"{latest.tau_mean:.2f}")
        self.speed.set(f"{latest.tokens_per_s:.1f}")
        self.ttft.set(fmt_ms(latest.ttft_s))
        self.block.set(f"{latest.block_size} · {latest.block_size_mode}")
        self.tokens.set(str(latest.tokens_generated))
        self.kv_bar.set(latest.target_kv_bytes, latest.target_kv_alloc_bytes)
        self.draft_bar.set(latest.draft_memory_bytes, latest.target_kv_alloc_bytes)
        self.state.setText("streaming")

    def finish_answer(self, reason: str) -> None:
        self.state.setText(f"done · {reason}" if reason and reason != "done" else "done")

    def show_saved(self, record: dict | None) -> None:
        """Show a stored answer's stats (when a conversation is opened)."""
        self.start_answer()
        step = (record or {}).get("step")
        if not step:
            self.state.setText("idle")
            return
        try:
            latest = StepStats(**step)
        except TypeError:
            self.state.setText("idle")  # stats saved by another version of the engine
            return
        committed = record.get("tau_steps") or []
        blocks = record.get("block_steps") or [0] * len(committed)
        self.update_steps(list(zip(committed, blocks, strict=False)), latest)
        self.state.setText("last answer")

    def set_engine(
        self,
        model: str,
        drafter: str,
        backend: str,
        reason: str,
        n_ctx: int,
        threads: int,
        kernels: tuple[str, ...] = (),
        verify: str = "",
    ) -> None:
        """The loaded engine; kernels: what the kernel check found (one line per
        configuration), verify: the verify mode in force and why."""
        self._engine = (model, drafter, backend, reason, n_ctx, threads, kernels, verify)
        muted = theme.colors().muted
        e = html.escape
        found = "".join(f"<br>{e(line)}" for line in kernels)
        self.engine_label.setText(
            f"<b>{e(model)}</b><br>drafter <b>{e(drafter)}</b> · backend <b>{e(backend)}</b><br>"
            f"context {n_ctx} · {threads} CPU thread{'s' if threads != 1 else ''}"
            f"<br><span style='color:{muted}'>{e(reason)}{found}</span>"
            + (f"<br>verify <b>{e(verify)}</b>" if verify else "")
        )

    def set_block_setting(self, block_size: str | int) -> None:
        if self.latest is None:
            self.block.set(f"{block_size}")

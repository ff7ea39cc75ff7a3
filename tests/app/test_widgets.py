"""The window's widgets offscreen: composer, stats panel and tau plot, settings dialog, message
cards."""

from __future__ import annotations

import sys

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from app import theme
from app.composer import Composer
from app.settings import (
    AppSettings,
)
from app.settings_dialog import SettingsDialog
from app.stats_panel import MAX_PLOT_STEPS, StatsPanel
from engine.events import StepStats


def test_composer_enter_sends_shift_enter_breaks_line(qtbot):
    composer = Composer()
    qtbot.addWidget(composer)
    sent = []
    composer.sendRequested.connect(sent.append)
    qtbot.keyClicks(composer.input, "line one")
    qtbot.keyClick(composer.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(composer.input, "line two")
    assert sent == []
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert sent == ["line one\nline two"]
    composer.set_generating(True)
    assert composer.send_button.text() == "Stop"
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert len(sent) == 1  # no second send while answering


def _step(**overrides) -> StepStats:
    values = dict(
        step=3,
        block_size=4,
        proposed=3,
        accepted=2,
        committed=3,
        tau_mean=2.25,
        slot_accept_counts=[3, 2, 0],
        slot_propose_counts=[3, 3, 2],
        tokens_generated=9,
        tokens_per_s=42.0,
        ttft_s=0.05,
        prefill_tokens=20,
        prefill_tokens_per_s=400.0,
        target_kv_bytes=3 * 2**20,
        target_kv_alloc_bytes=48 * 2**20,
        draft_memory_bytes=2048,
        draft_ms=0.2,
        verify_ms=20.0,
        block_size_mode="fixed",
    )
    values.update(overrides)
    return StepStats(**values)


def test_stats_panel_shows_tau_histogram_and_memory(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.start_answer()
    panel.update_steps([(1, 4), (3, 4), (3, 4)], _step())
    assert panel.tau_mean.value.text() == "2.25" and panel.tau_step.value.text() == "3"
    assert panel.block.value.text() == "4 · fixed"
    assert panel.plot.committed == [1, 3, 3]
    assert panel.histogram.rates() == [1.0, 2 / 3, 0.0]
    assert panel.kv_bar.value.text() == "3.1 MB / 50.3 MB"  # engine.units.format_size
    assert panel.kv_bar.bar.value() == 62  # 3/48 of 1000
    assert "MB" in panel.draft_bar.value.text()
    panel.resize(340, 900)
    image = panel.grab().toImage()
    assert image.width() >= 300  # paints without error


def test_settings_dialog_greys_out_unavailable_choices(qtbot):
    backends = {
        "auto": (True, "auto"),
        "cpu": (True, "cpu"),
        "cuda": (False, "no CUDA here"),
        "metal": (False, "no Metal"),
        "qnn": (False, "no QNN"),
    }
    dialog = SettingsDialog(AppSettings(), (False, "No HyFlash drafter is installed"), backends)
    qtbot.addWidget(dialog)
    model = dialog.drafter.model()
    hyflash = model.item(0)
    assert not hyflash.isEnabled() and "No HyFlash drafter" in hyflash.toolTip()
    assert model.item(1).isEnabled()  # n-gram
    cuda = dialog.backend.model().item(2)
    assert not cuda.isEnabled() and cuda.toolTip() == "no CUDA here"
    dialog.set_block_size(6)
    dialog.n_ctx.setValue(2048)
    assert "reloads the model" in dialog.reload_note.text()
    values = dialog.values()
    assert values.block_size == 6 and values.n_ctx == 2048


def test_pyside_void_calls_do_not_drain_none(qtbot):
    """PySide6 6.12.0 on Python 3.11 drops a reference to None per void call and crashes the
    app while streaming; pyproject pins a good version, which this checks."""
    from PySide6.QtWidgets import QLabel

    label = QLabel()
    qtbot.addWidget(label)
    before = sys.getrefcount(None)
    for _ in range(20000):
        label.setText("x")
    assert before - sys.getrefcount(None) < 1000


def test_message_card_code_block_copy_and_tint(qtbot):
    from PySide6.QtGui import QFontInfo, QGuiApplication, QTextCursor

    from app import theme
    from app.chat_view import MessageWidget

    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    text = "Here:\n```python\nprint('hi')\n```\nDone **now**."
    runs = [
        ("Here:\n```python\n", False),
        ("print('hi')", True),
        ("\n```\nDone ", False),
        ("**now**.", True),
    ]
    card.set_text(text, runs)
    code = card.code_blocks()
    assert len(code) == 1 and code[0].code == "print('hi')" and code[0].lang.text() == "python"
    assert QFontInfo(code[0].view.font()).fixedPitch()
    qtbot.mouseClick(code[0].copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "print('hi')"
    cursor = QTextCursor(code[0].view.document())
    cursor.setPosition(2)
    assert cursor.charFormat().background().color().name() == theme.colors().tint
    assert "Done now." in card.rendered_text()  # Markdown rendered, markup gone
    copied = []
    card.copyRequested.connect(lambda w: copied.append(w.text))
    qtbot.mouseClick(card.copy_button, Qt.MouseButton.LeftButton)
    assert copied == [text]


class _PaintCounter(QObject):
    """Counts the paint events a widget receives."""

    def __init__(self, widget) -> None:
        super().__init__(widget)
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, _obj, event) -> bool:  # noqa: N802
        self.count += event.type() == QEvent.Type.Paint
        return False


def test_stats_panel_repaints_only_what_changed(qtbot):
    """Stats arrive several times a second: the slot histogram and the memory bars stay as they are
    when their values did not change, while the tau plot takes every update."""
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.resize(340, 900)
    panel.show()
    qtbot.waitExposed(panel)
    panel.start_answer()
    panel.update_steps([(3, 4)], _step())
    QApplication.processEvents()
    histogram, plot = _PaintCounter(panel.histogram), _PaintCounter(panel.plot)
    kv_bar = _PaintCounter(panel.kv_bar.bar)
    panel.update_steps([(2, 4)], _step(committed=2, tokens_generated=11))
    QApplication.processEvents()
    assert plot.count == 1 and histogram.count == 0 and kv_bar.count == 0
    panel.update_steps([(3, 4)], _step(slot_accept_counts=[3, 3, 0], target_kv_bytes=6 * 2**20))
    QApplication.processEvents()
    assert plot.count == 2 and histogram.count == 1 and kv_bar.count == 1
    assert panel.histogram.rates() == [1.0, 1.0, 0.0]
    assert panel.kv_bar.bar.value() == 125  # 6/48 of 1000


def test_tau_plot_paints_bars_and_mean_line(qtbot):
    """The plot fills its own background (it is opaque), draws one bar per step and the
    running mean to the last step, also with more steps than pixels."""
    panel = StatsPanel()
    qtbot.addWidget(panel)
    plot = panel.plot
    plot.resize(300, 120)
    c = theme.colors()
    for steps in ([(1, 4)] * 10 + [(4, 4)] * 10, [(2, 4)] * MAX_PLOT_STEPS):
        plot.clear()
        plot.add(steps)
        image = plot.grab().toImage()
        colours = {image.pixelColor(x, y).name() for x in range(300) for y in range(120)}
        assert image.pixelColor(1, 1).name() == QColor(c.surface).name()
        assert QColor(c.plot_bar).name() in colours
        assert QColor(c.plot_line).name() in colours
    # the last step's bar (height 2 of 4) reaches the right end of the drawing area
    rect = plot.rect().adjusted(26, 6, -4, -16)
    assert image.pixelColor(rect.right() - 1, rect.bottom() - 2).name() != QColor(c.surface).name()

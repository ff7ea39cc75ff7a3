"""Settings dialog. Generation settings apply to the next answer; the drafter switches
without a reload; context length, threads and backend reload the model (it says so)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.settings import (
    BACKENDS,
    DRAFTER_LABELS,
    DRAFTERS,
    MIN_UI_TOP_P,
    THEMES,
    AppSettings,
    auto_threads,
    needs_reload,
)
from engine.drafters.spec import DRAFT_MODEL
from engine.llama.backends import DISPLAY as BACKEND_DISPLAY
from engine.options import EXTRA_BUFTS, OPTION, VERIFY_MODES

BACKEND_LABELS = {"auto": "Auto", **BACKEND_DISPLAY}
RELOAD_LABELS = {
    "n_ctx": "context length",
    "n_threads": "CPU threads",
    "backend": "backend",
    "extra_bufts": "extra CPU kernels",
    "verify_mode": "verify mode",
    "model": "model",
}
EXTRA_BUFTS_LABELS = {"auto": "Auto (checked per model)", "on": "On", "off": "Off"}
VERIFY_LABELS = {
    "auto": "Auto (exact where it costs little)",
    "exact": "Exact (token-identical to plain decoding)",
    "fast": "Fast (whole blocks; rounding may differ)",
}


def _combo(items: list[tuple[str, object]]) -> QComboBox:
    combo = QComboBox()
    for label, value in items:
        combo.addItem(label, value)
    return combo


def _spin(low: int, high: int, step: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setSingleStep(step)
    return spin


def _double_spin(low: float, high: float, step: float) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setDecimals(2)  # before the range: Qt rounds the range to the decimals
    spin.setRange(low, high)
    spin.setSingleStep(step)
    return spin


def _select(combo: QComboBox, value: object) -> None:
    index = combo.findData(value)
    combo.setCurrentIndex(max(index, 0))


def _disable_item(combo: QComboBox, index: int, tip: str) -> None:
    model = combo.model()
    if isinstance(model, QStandardItemModel):
        item = model.item(index)
        item.setEnabled(False)
        item.setToolTip(tip)


class SettingsDialog(QDialog):
    def __init__(
        self,
        settings: AppSettings,
        hyflash: tuple[bool, str],
        backends: dict[str, tuple[bool, str]],
        parent: QWidget | None = None,
        draft_models: Sequence[tuple[str, str]] = (),
    ) -> None:
        """draft_models: (spec, label) of the installed models that can draft for the loaded
        one (app.capabilities.draft_models), offered after the built-in drafters."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(460)
        self.original = settings
        col = QVBoxLayout(self)
        col.setSpacing(10)
        col.addWidget(self._answers_group(hyflash, draft_models))
        col.addWidget(self._runtime_group(backends))
        col.addWidget(self._appearance_group())
        self.reload_note = QLabel()
        self.reload_note.setObjectName("Muted")
        self.reload_note.setWordWrap(True)
        col.addWidget(self.reload_note)
        col.addWidget(self._buttons())

        self._load(settings)
        for w in (self.n_ctx, self.threads):
            w.valueChanged.connect(self._update_note)
        for combo in (self.backend, self.extra_bufts, self.verify_mode):
            combo.currentIndexChanged.connect(self._update_note)
        self._update_note()

    def _answers_group(
        self, hyflash: tuple[bool, str], draft_models: Sequence[tuple[str, str]]
    ) -> QGroupBox:
        gen = QGroupBox("Answers (apply to the next answer)")
        form = QFormLayout(gen)
        # The ranges keep values GenerationSettings accepts, within the app's own limits
        # (engine.options' rows), and only those; the rows' help are the tooltips.
        block, temperature = OPTION["block_size"], OPTION["temperature"]
        top_p, max_tokens = OPTION["top_p"], OPTION["max_tokens"]
        self.block = _combo(
            [("Auto (chosen per step)", "auto"), ("1 (speculation off)", 1)]
            + [(str(n), n) for n in range(2, block.app_max + 1)]
        )
        self.block.setToolTip(block.help)
        form.addRow("Draft block size", self.block)
        self.drafter = _combo(
            [(DRAFTER_LABELS.get(d, d), d) for d in DRAFTERS]
            + [(label, spec) for spec, label in draft_models]
        )
        saved = self.original.drafter
        if self.drafter.findData(saved) < 0:  # a draft model chosen for another model
            self.drafter.addItem(
                f"Draft model: {saved[len(DRAFT_MODEL) :]} (not for this model)", saved
            )
        ok, why = hyflash
        if not ok:
            _disable_item(self.drafter, DRAFTERS.index("hyflash"), why)
            self.drafter.setItemText(DRAFTERS.index("hyflash"), "HyFlash (not installed)")
        self.drafter.setToolTip("Switching drafters does not reload the model")
        form.addRow("Drafter", self.drafter)
        self.temperature = _double_spin(0.0, temperature.app_max, 0.1)
        self.temperature.setToolTip(temperature.help)
        form.addRow("Temperature", self.temperature)
        self.top_p = _double_spin(MIN_UI_TOP_P, 1.0, 0.05)
        self.top_p.setToolTip(top_p.help)
        form.addRow("Top-p", self.top_p)
        self.max_tokens = _spin(1, max_tokens.app_max, 64)
        self.max_tokens.setToolTip(max_tokens.help)
        form.addRow("Max tokens per answer", self.max_tokens)
        return gen

    def _runtime_group(self, backends: dict[str, tuple[bool, str]]) -> QGroupBox:
        runtime = QGroupBox("Model runtime (changes reload the model)")
        form = QFormLayout(runtime)
        self.n_ctx = _spin(256, 131072, 1024)
        form.addRow("Context length (tokens)", self.n_ctx)
        self.threads = _spin(0, 256, 1)
        self.threads.setSpecialValueText(f"Auto ({auto_threads()})")
        form.addRow("CPU threads", self.threads)
        self.backend = _combo([(BACKEND_LABELS.get(b, b), b) for b in BACKENDS])
        for i, name in enumerate(BACKENDS):
            available, reason = backends.get(name, (name in ("auto", "cpu"), ""))
            if available:
                self.backend.setItemData(i, reason, Qt.ItemDataRole.ToolTipRole)
            else:
                _disable_item(self.backend, i, reason)
        form.addRow("Backend", self.backend)
        self.extra_bufts = _combo([(EXTRA_BUFTS_LABELS[v], v) for v in EXTRA_BUFTS])
        self.extra_bufts.setToolTip(
            "llama.cpp's extra weight layouts (CPU repack, AMX). Auto: a check in a separate "
            "process decides once per model and machine (on some CPUs they crash)."
        )
        form.addRow("Extra CPU kernels", self.extra_bufts)
        self.verify_mode = _combo([(VERIFY_LABELS[v], v) for v in VERIFY_MODES])
        self.verify_mode.setToolTip(
            "Some llama.cpp kernels round differently for many rows than for one. Exact "
            "verifies drafts in chunks whose results equal plain decoding bit for bit."
        )
        form.addRow("Verify mode", self.verify_mode)
        return runtime

    def _appearance_group(self) -> QGroupBox:
        look = QGroupBox("Appearance")
        form = QFormLayout(look)
        self.theme = _combo([(t.capitalize(), t) for t in THEMES])
        form.addRow("Theme", self.theme)
        self.font_size = _spin(7, 24, 1)
        self.font_size.setSuffix(" pt")
        form.addRow("Font size", self.font_size)
        self.tint = QCheckBox("Tint accepted draft tokens in answers")
        form.addRow("", self.tint)
        return look

    def _buttons(self) -> QDialogButtonBox:
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        return buttons

    def _load(self, s: AppSettings) -> None:
        _select(self.block, s.block_size)
        _select(self.drafter, s.drafter)
        self.temperature.setValue(s.temperature)
        self.top_p.setValue(s.top_p)
        self.max_tokens.setValue(s.max_tokens)
        self.n_ctx.setValue(s.n_ctx)
        self.threads.setValue(s.n_threads)
        _select(self.backend, s.backend)
        _select(self.extra_bufts, s.extra_bufts)
        _select(self.verify_mode, s.verify_mode)
        _select(self.theme, s.theme)
        self.font_size.setValue(s.font_size)
        self.tint.setChecked(s.tint_drafted)

    def set_block_size(self, value: str | int) -> None:
        _select(self.block, value)

    def values(self) -> AppSettings:
        return replace(
            self.original,
            block_size=self.block.currentData(),
            drafter=self.drafter.currentData(),
            temperature=round(self.temperature.value(), 2),
            top_p=round(self.top_p.value(), 2),
            max_tokens=self.max_tokens.value(),
            n_ctx=self.n_ctx.value(),
            n_threads=self.threads.value(),
            backend=self.backend.currentData(),
            extra_bufts=self.extra_bufts.currentData(),
            verify_mode=self.verify_mode.currentData(),
            theme=self.theme.currentData(),
            font_size=self.font_size.value(),
            tint_drafted=self.tint.isChecked(),
        )

    def _update_note(self) -> None:
        changed = needs_reload(self.original, self.values())
        if changed:
            names = ", ".join(RELOAD_LABELS[c] for c in changed)
            self.reload_note.setText(f"Changing {names} reloads the model when you press OK.")
        else:
            self.reload_note.setText(
                "Block size, drafter and sampling apply to the next answer without a reload."
            )

"""The input box: Enter sends, Shift+Enter adds a line; Send turns into Stop while answering."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


class InputEdit(QPlainTextEdit):
    submitted = Signal()
    cancelled = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        if event.key() == Qt.Key.Key_Escape:
            self.cancelled.emit()
            return
        super().keyPressEvent(event)


class Composer(QWidget):
    sendRequested = Signal(str)
    stopRequested = Signal()
    regenerateRequested = Signal()
    editCancelled = Signal()

    def __init__(self) -> None:
        super().__init__()
        col = QVBoxLayout(self)
        col.setContentsMargins(24, 4, 24, 14)
        col.setSpacing(6)

        self.edit_banner = QFrame()
        self.edit_banner.setObjectName("Banner")
        self.edit_banner.setProperty("level", "info")
        row = QHBoxLayout(self.edit_banner)
        row.setContentsMargins(10, 4, 4, 4)
        self.edit_label = QLabel(
            "Editing a message: Enter sends it again; later messages are replaced."
        )
        cancel = QToolButton()
        cancel.setText("Cancel edit")
        cancel.clicked.connect(self.editCancelled.emit)
        row.addWidget(self.edit_label, 1)
        row.addWidget(cancel)
        self.edit_banner.setVisible(False)
        col.addWidget(self.edit_banner)

        box = QFrame()
        box.setObjectName("Composer")
        inner = QHBoxLayout(box)
        inner.setContentsMargins(10, 6, 8, 6)
        self.input = InputEdit()
        self.input.setPlaceholderText("Message the model…  (Enter sends, Shift+Enter: new line)")
        self.input.setFixedHeight(64)
        self.input.submitted.connect(self._send)
        self.input.cancelled.connect(self._escape)
        inner.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("Primary")
        self.send_button.setToolTip("Send (Enter)")
        self.send_button.clicked.connect(self._send_or_stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip("Write the last answer again")
        self.regen_button.clicked.connect(self.regenerateRequested.emit)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.regen_button)
        inner.addLayout(buttons)
        col.addWidget(box)
        self.generating = False

    def text(self) -> str:
        return self.input.toPlainText()

    def set_text(self, text: str) -> None:
        self.input.setPlainText(text)
        self.input.setFocus()

    def _send(self) -> None:
        if self.generating:
            return
        text = self.text().strip()
        if text:
            self.sendRequested.emit(text)

    def _escape(self) -> None:
        if self.generating:
            self.stopRequested.emit()
        else:
            self.editCancelled.emit()

    def _send_or_stop(self) -> None:
        if self.generating:
            self.stopRequested.emit()
        else:
            self._send()

    def set_generating(self, generating: bool) -> None:
        self.generating = generating
        self.send_button.setText("Stop" if generating else "Send")
        self.send_button.setObjectName("Danger" if generating else "Primary")
        self.send_button.setToolTip("Stop the answer (Esc)" if generating else "Send (Enter)")
        self.send_button.style().unpolish(self.send_button)
        self.send_button.style().polish(self.send_button)
        self.regen_button.setEnabled(not generating)

    def set_editing(self, editing: bool) -> None:
        self.edit_banner.setVisible(editing)

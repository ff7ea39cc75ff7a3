"""The Local server panel: the switch, the URL, what the server is doing, its last requests."""

from __future__ import annotations

import secrets
import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
)

LOG_LINES = 50


def log_line(entry) -> str:
    """One request (engine.server.middleware.RequestLog) as a line of the log."""
    parts = [f"{time.strftime('%H:%M:%S')}  {entry.method} {entry.path}  {entry.status}"]
    h = entry.hyflash
    if h:
        parts.append(
            f"{entry.completion_tokens} tok · τ {h['tau']:.2f} · "
            f"{h['decode_tokens_per_s']:.1f} tok/s · {h['drafter']}"
        )
    if entry.outcome == "cancelled":
        parts.append("client left")
    parts.append(f"{entry.seconds:.2f} s")
    return " · ".join(parts)


def new_key() -> str:
    return "hf-" + secrets.token_urlsafe(24)


class ServerPanel(QDialog):
    switchToggled = Signal(bool, int)  # on, port
    accessChanged = Signal(bool, str)  # open to the network, the API key ("" = none)

    def __init__(self, port: int, parent=None, lan: bool = False, key: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Local server")
        self.setMinimumWidth(520)
        col = QVBoxLayout(self)
        intro = QLabel(
            "Serve the loaded model to other programs on this computer through an "
            "OpenAI-compatible API (127.0.0.1; other devices only when you open it to the "
            "network, with an API key). API requests and chats in the window take turns on the "
            "one engine."
        )
        intro.setObjectName("Muted")
        intro.setWordWrap(True)
        col.addWidget(intro)
        form = QFormLayout()
        self.switch = QCheckBox("Local server on")
        self.switch.toggled.connect(lambda on: self.switchToggled.emit(on, self.port.value()))
        form.addRow("", self.switch)
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("Any free port")
        self.port.setValue(port)
        form.addRow("Port", self.port)
        self.lan = QCheckBox("Open to other devices on the network (needs the API key)")
        self.lan.setChecked(lan)
        form.addRow("", self.lan)
        self.key = QLineEdit(key)
        self.key.setPlaceholderText("none: any program on this computer may use it")
        self.new_key_button = QPushButton("New key")
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        key_row.addWidget(self.new_key_button)
        form.addRow("API key", key_row)
        self.lan.toggled.connect(self._on_lan)
        self.new_key_button.clicked.connect(lambda: self._set_key(new_key()))
        self.key.editingFinished.connect(self._emit_access)
        self.url = QLabel("–")
        self.url.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("URL", self.url)
        self.status = QLabel("Off")
        self.status.setWordWrap(True)
        form.addRow("Status", self.status)
        col.addLayout(form)
        col.addWidget(QLabel("Requests"))
        self.log = QListWidget()
        col.addWidget(self.log, 1)

    def _on_lan(self, on: bool) -> None:
        if on and not self.key.text().strip():
            self._set_key(new_key())  # the network is never open without a key
        else:
            self._emit_access()

    def _set_key(self, key: str) -> None:
        self.key.setText(key)
        self._emit_access()

    def _emit_access(self) -> None:
        self.key.setText(self.key.text().strip())
        self.accessChanged.emit(self.lan.isChecked(), self.key.text())

    def set_running(self, running: bool, message: str) -> None:
        self.switch.blockSignals(True)  # reflect what runs, without asking again
        self.switch.setChecked(running)
        self.switch.blockSignals(False)
        for field in (self.port, self.lan, self.key, self.new_key_button):
            field.setEnabled(not running)  # the server runs as it was started
        self.url.setText(message if running else "–")
        self.status.setText("Idle" if running else message)

    def set_busy(self, label: str | None) -> None:
        if self.switch.isChecked():
            self.status.setText(f"Answering {label}…" if label else "Idle")

    def add_request(self, entry) -> None:
        self.log.addItem(log_line(entry))
        while self.log.count() > LOG_LINES:
            self.log.takeItem(0)
        self.log.scrollToBottom()

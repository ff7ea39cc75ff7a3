"""An in-window message strip (errors, recoveries, reload notices): visible but never modal,
so the app stays usable and tests can read it."""

from __future__ import annotations

import functools
from collections.abc import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton

from app.storage import StorageError


class Banner(QFrame):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("Banner")
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 6, 6, 6)
        self.label = QLabel()
        self.label.setWordWrap(True)
        close = QToolButton()
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        row.addWidget(self.label, 1)
        row.addWidget(close)
        self.hide()

    def show_message(self, text: str, level: str = "error") -> None:
        self.label.setText(text)
        self.setProperty("level", level)
        self.style().unpolish(self)
        self.style().polish(self)
        self.show()

    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()


def guarded(method: Callable) -> Callable:
    """Storage failures in a UI action become a message in `self.banner`, not a traceback."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return None

    return wrapper

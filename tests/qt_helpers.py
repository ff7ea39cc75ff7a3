"""Helpers for Qt tests."""

from __future__ import annotations

import time

from PySide6.QtCore import QCoreApplication, QEventLoop


def spin(predicate, timeout: float = 60.0) -> bool:
    """Run the Qt event loop until predicate() or the timeout (module fixtures lack qtbot)."""
    end = time.monotonic() + timeout
    while not predicate() and time.monotonic() < end:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.005)
    return bool(predicate())

"""How long the Qt event loop went without running: a 10 ms timer notes the time between its
ticks, so a gap well above 10 ms is a stall the user would feel. Used by the window's
responsiveness test and by scripts/bench_app_speed.py."""

from __future__ import annotations

from PySide6.QtCore import QElapsedTimer, QTimer


class LoopGaps:
    def __init__(self, interval_ms: int = 10) -> None:
        self.gaps: list[float] = []  # ms between consecutive ticks
        self._clock = QElapsedTimer()
        self._last = 0
        self._timer = QTimer()
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._clock.start()
        self._last = self._clock.elapsed()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        now = self._clock.elapsed()
        self.gaps.append(now - self._last)
        self._last = now

"""The main window's Local server: the server itself, its panel, its status-bar label, and
what the window shows while an API request holds the one engine."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QMainWindow

from app.banner import Banner
from app.generation import AnswerController
from app.local_server import LocalServerController
from app.server_panel import ServerPanel
from app.stats_panel import StatsPanel
from app.worker import EngineHost


class ServerLink(QObject):
    def __init__(
        self,
        host: EngineHost,
        answers: AnswerController,
        stats: StatsPanel,
        banner: Banner,
        port: int,
        window: QMainWindow,
        lan: bool = False,
        key: str = "",
    ) -> None:
        super().__init__(window)
        self.answers, self.stats, self.banner = answers, stats, banner
        self.server = LocalServerController(host, self)
        self.panel = ServerPanel(port, window, lan=lan, key=key)
        self.label = QLabel()
        self.label.setVisible(False)
        window.statusBar().addPermanentWidget(self.label)
        self.server.stateChanged.connect(self._on_state)
        self.server.requestLogged.connect(self.panel.add_request)
        answers.serverJobStarted.connect(self._on_job_started)
        answers.serverJobEnded.connect(self._on_job_ended)

    def _on_state(self, running: bool, message: str) -> None:
        self.panel.set_running(running, message)
        self.label.setText(f"API: {message}")
        self.label.setVisible(running)
        if not running and message != "Stopped":
            self.banner.show_message(f"Local server: {message}", "warning")

    def _on_job_started(self, label: str) -> None:
        self.label.setText(f"API busy: {label}")
        self.panel.set_busy(label)
        active = self.answers.active
        if active is None:
            self.stats.start_answer()
        else:  # the window's answer waits for its turn
            active.widget.set_status("waiting for the local server…")

    def _on_job_ended(self) -> None:
        self.label.setText(f"API: {self.server.url}")
        self.panel.set_busy(None)
        active = self.answers.active
        if active is None:
            self.stats.finish_answer("API request")
        else:
            active.widget.set_status("thinking…")

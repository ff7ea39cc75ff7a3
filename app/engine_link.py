"""Keeps the worker's engine in step with the settings and shows its state: the header's model
label, the status bar and its busy bar, the stats panel's engine lines, and load or drafter
failures in the banner. Everything here runs on the UI thread."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel, QProgressBar

from app.chat_pane import ChatPane
from app.settings import RELOAD_FIELDS, AppSettings
from app.stats_panel import StatsPanel
from app.worker import EngineConfig, EngineHost, disconnect_all
from engine.events import EngineInfo


def engine_config(settings: AppSettings) -> EngineConfig:
    """What the worker should load for `settings`."""
    return EngineConfig(
        model=settings.model,
        drafter=settings.drafter,
        n_ctx=settings.n_ctx,
        n_threads=settings.threads(),
        backend=settings.backend,
        extra_bufts=None if settings.extra_bufts == "auto" else settings.extra_bufts == "on",
        verify_mode=settings.verify_mode,
    )


def needs_reload_config(have: EngineConfig, want: EngineConfig) -> bool:
    """Whether going from `have` to `want` rebuilds the llama.cpp context (a drafter does not)."""
    return any(getattr(have, name) != getattr(want, name) for name in RELOAD_FIELDS)


class EngineLink(QObject):
    drafterChanged = Signal(str)  # the drafter that really runs now

    def __init__(
        self,
        host: EngineHost,
        pane: ChatPane,
        stats: StatsPanel,
        status_label: QLabel,
        busy: QProgressBar,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.host = host
        self.pane, self.stats, self.status_label, self.busy = pane, stats, status_label, busy
        self.state = "unloaded"  # "unloaded" | "loading" | "ready" | "failed"
        self.info: EngineInfo | None = None  # the loaded engine's, None until it is ready
        w = host.worker
        self._connections = [
            (w.stateChanged, self._on_state),
            (w.loaded, self._on_loaded),
            (w.drafterChanged, self.drafterChanged.emit),
            (w.drafterFailed, self._on_drafter_failed),
            (w.loadFailed, self._on_load_failed),
        ]
        for signal, slot in self._connections:
            signal.connect(slot)

    def sync(self, settings: AppSettings) -> None:
        """Load what `settings` ask for, or adopt the host's engine if it already matches."""
        want = engine_config(settings)
        have = self.host.config
        if have is None or needs_reload_config(have, want):
            self.host.load(want)
        elif have.drafter != want.drafter:
            self.host.set_drafter(want.drafter)
        self._on_state(self.host.state, self.host.state_message)
        if self.host.state == "ready" and self.host.info is not None:
            self._on_loaded(self.host.info)

    def reload(self, settings: AppSettings) -> None:
        self.host.load(engine_config(settings))
        self._on_state("loading", "Reloading the model…")  # at once, not when the worker says

    def set_drafter(self, name: str) -> None:
        self.host.set_drafter(name)  # no reload: the worker swaps the drafter only

    def disconnect_host(self) -> None:
        """Stop listening to the worker (the host may outlive the window)."""
        disconnect_all(self._connections)
        self._connections = []

    def _on_state(self, state: str, message: str) -> None:
        self.state = state
        if state in ("loading", "failed", "unloaded"):
            self.info = None
        self.busy.setVisible(state == "loading")
        if state != "ready" or self.info is None:
            self.status_label.setText(message)
        if state == "loading":
            self.pane.model_label.setText("loading model…")
            self.stats.engine_label.setText("Loading the model and timing this machine…")

    def _on_loaded(self, info: EngineInfo) -> None:
        self.info = info
        self.pane.model_label.setText(f"{info.model_id} · {info.drafter} · {info.backend}")
        self.stats.set_engine(
            info.model_id,
            info.drafter,
            info.backend,
            info.backend_reason,
            info.n_ctx,
            info.n_threads,
            info.kernels,
            f"{info.verify_mode}: {info.verify_reason}",
        )
        self.status_label.setText(
            f"Ready · {info.model_id} · drafter {info.drafter} · {info.backend} · "
            f"context {info.n_ctx}"
        )

    def _on_load_failed(self, message: str) -> None:
        self.info = None
        self.pane.model_label.setText("no model loaded")
        self.pane.banner.show_message(
            f"The model could not be loaded: {message}\nChoose another model in Models → "
            "Model manager, or change the settings.",
            "error",
        )

    def _on_drafter_failed(self, message: str) -> None:
        self.pane.banner.show_message(f"Drafter not changed: {message}", "warning")

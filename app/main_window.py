"""The main window: conversations, the chat, the composer and the live stats panel.

It wires the parts together and keeps the chat's state (which conversation, which answer is
streaming, which message is being edited). Model work happens on the EngineHost's thread;
everything here runs on the UI thread and only does quick things (render, SQLite writes).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEventLoop, Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import APP_DISPLAY_NAME, theme
from app.about import AboutDialog
from app.banner import Banner
from app.capabilities import backend_status, hyflash_status
from app.chat_view import ChatView, MessageWidget
from app.composer import Composer
from app.elided_label import ElidedLabel
from app.export import write_export
from app.format import STOP_REASONS, footer_line
from app.local_server import LocalServerController
from app.markdown import Run
from app.server_panel import ServerPanel
from app.settings import DRAFTERS, THEMES, AppSettings, SettingsStore, needs_reload
from app.settings_dialog import RELOAD_LABELS, SettingsDialog
from app.sidebar import Sidebar
from app.stats_panel import StatsPanel
from app.storage import DEFAULT_TITLE, Storage, StorageError
from app.worker import EngineConfig, EngineHost, GenerationRequest, StatsUpdate
from engine.events import Finished, StepStats

TITLE_CHARS = 48
SYSTEM_SAVE_DELAY_MS = 400


@dataclass
class ActiveAnswer:
    request: GenerationRequest
    conv_id: int
    widget: MessageWidget
    text: str = ""
    runs: list[Run] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)
    latest: StepStats | None = None


def _guarded(method):
    """Storage failures in a UI action become a message in the window, not a traceback."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return None

    return wrapper


def engine_config(settings: AppSettings) -> EngineConfig:
    return EngineConfig(
        model=settings.model,
        drafter=settings.drafter,
        n_ctx=settings.n_ctx,
        n_threads=settings.threads(),
        backend=settings.backend,
        extra_bufts=None if settings.extra_bufts == "auto" else settings.extra_bufts == "on",
        verify_mode=settings.verify_mode,
    )


def _compact_runs(runs: list[Run]) -> list[list[int]]:
    return [[len(text), int(drafted)] for text, drafted in runs if text]


def _expand_runs(text: str, compact: list | None) -> list[Run] | None:
    if not compact:
        return None
    runs, pos = [], 0
    for item in compact:
        try:
            n, drafted = int(item[0]), bool(item[1])
        except (TypeError, ValueError, IndexError):
            return None
        runs.append((text[pos : pos + n], drafted))
        pos += n
    return runs if pos == len(text) else None


class MainWindow(QMainWindow):
    def __init__(
        self,
        host: EngineHost | None = None,
        settings_store: SettingsStore | None = None,
        storage: Storage | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle(APP_DISPLAY_NAME)
        self.resize(1280, 820)
        self.store = settings_store or SettingsStore()
        self.settings, settings_message = self.store.load()
        self.storage = storage or Storage()
        self.current_conv: int | None = None
        self.active: ActiveAnswer | None = None
        self.editing_id: int | None = None
        self.engine_info = None
        self.engine_state = "unloaded"
        self.last_finished: Finished | None = None
        self.last_steps: list[tuple[int, int]] = []
        self._connections: list = []

        theme.apply_theme(QApplication.instance(), self.settings.theme, self.settings.font_size)
        self._build()
        self._build_menus()

        startup = [m for m in (settings_message, self.storage.recovery_message) if m]
        if startup:
            self.banner.show_message("\n".join(startup), "warning")

        self.owns_host = host is None
        self.host = host or EngineHost()
        self._connect_host()
        self._sync_engine()
        self._build_server()

        QGuiApplication.styleHints().colorSchemeChanged.connect(self._system_scheme_changed)
        self.refresh_conversations()
        ids = self.sidebar.ids()
        if ids:
            self.open_conversation(ids[0])
        else:
            self.render_conversation()

    # ----- layout -----------------------------------------------------------------------------

    def _build(self) -> None:
        self.sidebar = Sidebar()
        self.sidebar.setMinimumWidth(200)
        self.sidebar.conversationSelected.connect(self.open_conversation)
        self.sidebar.newRequested.connect(self.new_conversation)
        self.sidebar.renameRequested.connect(lambda cid: self.rename_conversation(cid))
        self.sidebar.deleteRequested.connect(lambda cid: self.delete_conversation(cid, True))
        self.sidebar.exportRequested.connect(self._export_dialog)
        self.sidebar.searchChanged.connect(lambda _t: self.refresh_conversations())

        center = QWidget()
        col = QVBoxLayout(center)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        header = QWidget()
        header.setObjectName("ChatHeader")
        header.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        row = QHBoxLayout(header)
        row.setContentsMargins(24, 10, 16, 10)
        self.title_label = ElidedLabel(DEFAULT_TITLE)
        self.title_label.setObjectName("ChatTitle")
        self.model_label = QLabel("No model loaded")
        self.model_label.setObjectName("Muted")
        self.model_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.system_button = QToolButton()
        self.system_button.setObjectName("Flat")
        self.system_button.setText("System prompt")
        self.system_button.setCheckable(True)
        self.system_button.setToolTip("This conversation's system prompt")
        self.system_button.toggled.connect(self._toggle_system)
        row.addWidget(self.title_label, 1)
        row.addSpacing(12)
        row.addWidget(self.model_label)
        row.addSpacing(10)
        row.addWidget(self.system_button)
        col.addWidget(header)

        self.system_edit = QPlainTextEdit()
        self.system_edit.setObjectName("SystemPrompt")
        self.system_edit.setPlaceholderText(
            "System prompt for this conversation (e.g. 'You are a concise assistant.')"
        )
        self.system_edit.setFixedHeight(70)
        self.system_edit.setVisible(False)
        self._system_timer = QTimer(self)
        self._system_timer.setSingleShot(True)
        self._system_timer.setInterval(SYSTEM_SAVE_DELAY_MS)
        self._system_timer.timeout.connect(self._save_system_prompt)
        self.system_edit.textChanged.connect(self._system_timer.start)
        system_box = QWidget()
        sys_row = QVBoxLayout(system_box)
        sys_row.setContentsMargins(24, 8, 24, 0)
        sys_row.addWidget(self.system_edit)
        col.addWidget(system_box)

        banner_box = QWidget()
        banner_row = QVBoxLayout(banner_box)
        banner_row.setContentsMargins(24, 8, 24, 0)
        self.banner = Banner()
        banner_row.addWidget(self.banner)
        col.addWidget(banner_box)

        self.chat = ChatView()
        col.addWidget(self.chat, 1)
        self.composer = Composer()
        self.composer.sendRequested.connect(self.send_message)
        self.composer.stopRequested.connect(self.stop)
        self.composer.regenerateRequested.connect(self.regenerate)
        self.composer.editCancelled.connect(self._cancel_edit)
        col.addWidget(self.composer)

        self.stats = StatsPanel()
        self.stats.setVisible(self.settings.show_stats)
        self.stats.set_block_setting(self.settings.block_size)

        split = QSplitter()
        split.setChildrenCollapsible(False)
        split.setHandleWidth(1)
        split.addWidget(self.sidebar)
        split.addWidget(center)
        split.addWidget(self.stats)
        split.setStretchFactor(1, 1)
        split.setSizes([240, 700, 340])
        self.setCentralWidget(split)

        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setFixedWidth(120)
        self.busy.setVisible(False)
        self.statusBar().addPermanentWidget(self.busy)
        self.status_label = QLabel()
        self.statusBar().addWidget(self.status_label, 1)
        self.server_label = QLabel()
        self.server_label.setVisible(False)
        self.statusBar().addPermanentWidget(self.server_label)

    def _build_menus(self) -> None:
        bar = self.menuBar()

        def act(menu, text, slot, shortcut=None, checkable=False, checked=False) -> QAction:
            action = QAction(text, self)
            if shortcut:
                action.setShortcut(QKeySequence(shortcut))
            action.setCheckable(checkable)
            if checkable:
                action.setChecked(checked)
                action.toggled.connect(slot)
            else:
                action.triggered.connect(slot)
            menu.addAction(action)
            return action

        file = bar.addMenu("&File")
        act(file, "New chat", self.new_conversation, "Ctrl+N")
        act(file, "Export chat as Markdown…", lambda: self._export_dialog(self.current_conv, "md"))
        act(file, "Export chat as JSON…", lambda: self._export_dialog(self.current_conv, "json"))
        file.addSeparator()
        act(file, "Quit", self.close, "Ctrl+Q")
        edit = bar.addMenu("&Edit")
        act(edit, "Settings…", self.open_settings, "Ctrl+,")
        view = bar.addMenu("&View")
        self.stats_action = act(
            view, "Stats panel", self._toggle_stats, "Ctrl+I", True, self.settings.show_stats
        )
        self.tint_action = act(
            view,
            "Tint accepted draft tokens",
            self._toggle_tint,
            None,
            True,
            self.settings.tint_drafted,
        )
        themes = view.addMenu("Theme")
        for name in THEMES:
            themes.addAction(name.capitalize(), lambda n=name: self.set_theme(n))
        models = bar.addMenu("&Models")
        act(models, "Model manager…", self.open_model_manager)
        act(models, "Local server…", self.open_server_panel, "Ctrl+Shift+L")
        help_menu = bar.addMenu("&Help")
        act(help_menu, "About HyFlash Chat", self.open_about)
        stop = QAction(self)
        stop.setShortcut(QKeySequence("Esc"))
        stop.triggered.connect(self.stop)
        self.addAction(stop)

    # ----- engine -----------------------------------------------------------------------------

    def _connect_host(self) -> None:
        w = self.host.worker
        pairs = [
            (w.stateChanged, self._on_state),
            (w.loaded, self._on_loaded),
            (w.drafterChanged, self._on_drafter_changed),
            (w.drafterFailed, self._on_drafter_failed),
            (w.loadFailed, self._on_load_failed),
            (w.textDelta, self._on_delta),
            (w.stepStats, self._on_stats),
            (w.finished, self._on_finished),
            (w.error, self._on_error),
            (w.serverJobStarted, self._on_server_job_started),
            (w.serverJobEnded, self._on_server_job_ended),
        ]
        for signal, slot in pairs:
            signal.connect(slot)
        self._connections = pairs

    def _sync_engine(self) -> None:
        """Load what the settings ask for, or adopt the host's engine if it already matches."""
        want = engine_config(self.settings)
        have = self.host.config
        if have is None or needs_reload_config(have, want):
            self.host.load(want)
        elif have.drafter != want.drafter:
            self.host.set_drafter(want.drafter)
        self._on_state(self.host.state, self.host.state_message)
        if self.host.state == "ready" and self.host.info is not None:
            self._on_loaded(self.host.info)

    def _on_state(self, state: str, message: str) -> None:
        self.engine_state = state
        if state in ("loading", "failed", "unloaded"):
            self.engine_info = None
        self.busy.setVisible(state == "loading")
        if state != "ready" or self.engine_info is None:
            self.status_label.setText(message)
        if state == "loading":
            self.model_label.setText("loading model…")
            self.stats.engine_label.setText("Loading the model and timing this machine…")

    def _on_loaded(self, info) -> None:
        self.engine_info = info
        self.model_label.setText(f"{info.model_id} · {info.drafter} · {info.backend}")
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
        self.engine_info = None
        self.model_label.setText("no model loaded")
        self.banner.show_message(
            f"The model could not be loaded: {message}\nChoose another model in Models → "
            "Model manager, or change the settings.",
            "error",
        )

    def _on_drafter_changed(self, name: str) -> None:
        if name in DRAFTERS and name != self.settings.drafter:
            self.settings.drafter = name  # the settings tell what really runs
            self._save_settings()

    def _on_drafter_failed(self, message: str) -> None:
        self.banner.show_message(f"Drafter not changed: {message}", "warning")

    # ----- conversations ----------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        try:
            convs = self.storage.list_conversations(self.sidebar.search.text())
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return
        self.sidebar.set_conversations(convs, self.current_conv)

    @_guarded
    def new_conversation(self) -> None:
        if self.current_conv is not None and not self._messages(self.current_conv):
            self.open_conversation(self.current_conv)  # reuse an empty chat, don't pile up
            return
        self._cancel_edit()
        try:
            conv_id = self.storage.create_conversation()
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return
        self.current_conv = conv_id
        self.refresh_conversations()
        self.open_conversation(conv_id)
        self.composer.input.setFocus()

    @_guarded
    def open_conversation(self, conv_id: int) -> None:
        try:
            conv = self.storage.conversation(conv_id)
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return
        if conv is None:
            return
        self._flush_system_prompt()
        self._cancel_edit()
        self.current_conv = conv_id
        self.title_label.setText(conv.title)
        self.system_edit.blockSignals(True)
        self.system_edit.setPlainText(conv.system_prompt)
        self.system_edit.blockSignals(False)
        self.system_button.setText("System prompt ✓" if conv.system_prompt else "System prompt")
        self.render_conversation()
        self.sidebar.set_conversations(
            self.storage.list_conversations(self.sidebar.search.text()), conv_id
        )

    def render_conversation(self) -> None:
        self.chat.clear()
        if self.current_conv is None:
            self._update_regenerate()
            return
        last_record = None
        for m in self._messages(self.current_conv):
            runs = _expand_runs(m.content, (m.stats or {}).get("runs"))
            widget = self._add_widget(m.role, m.content, m.id, runs)
            if m.role == "assistant" and m.stats:
                widget.set_footer(footer_line(m.stats))
                last_record = m.stats
        if self.active is not None and self.active.conv_id == self.current_conv:
            # an answer still streaming into this chat: show it again
            self.active.widget = self._add_widget(
                "assistant", self.active.text, None, self.active.runs
            )
            self.active.widget.set_status("writing…")
        self._update_regenerate()
        if self.active is None:
            self.stats.show_saved(last_record)
        self.chat.scroll_to_bottom()

    def _add_widget(
        self, role: str, text: str, message_id: int | None, runs: list[Run] | None
    ) -> MessageWidget:
        widget = self.chat.add_message(
            role,
            text,
            self.settings.font_size,
            message_id,
            runs if self.settings.tint_drafted else None,
        )
        widget.copyRequested.connect(self.copy_message)
        widget.editRequested.connect(self.edit_message)
        widget.regenerateRequested.connect(lambda _w: self.regenerate())
        return widget

    def _messages(self, conv_id: int):
        try:
            return self.storage.messages(conv_id)
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return []

    @_guarded
    def rename_conversation(self, conv_id: int, title: str | None = None) -> None:
        if title is None:
            conv = self.storage.conversation(conv_id)
            title, ok = QInputDialog.getText(
                self, "Rename chat", "Title:", text=conv.title if conv else ""
            )
            if not ok:
                return
        if not title.strip():
            return
        self.storage.rename_conversation(conv_id, title.strip())
        if conv_id == self.current_conv:
            self.title_label.setText(title.strip())
        self.refresh_conversations()

    @_guarded
    def delete_conversation(self, conv_id: int, confirm: bool = False) -> None:
        if confirm:
            answer = QMessageBox.question(
                self, "Delete chat", "Delete this chat and all its messages?"
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        if self.active is not None and self.active.conv_id == conv_id:
            self.stop()
        self.storage.delete_conversation(conv_id)
        if conv_id == self.current_conv:
            self.current_conv = None
            self.chat.clear()
            self.title_label.setText(DEFAULT_TITLE)
            self.system_edit.clear()
        self.refresh_conversations()

    def _export_dialog(self, conv_id: int | None, kind: str) -> None:
        if conv_id is None:
            return
        conv = self.storage.conversation(conv_id)
        if conv is None:
            return
        suffix = ".json" if kind == "json" else ".md"
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in conv.title).strip()
        path, _ = QFileDialog.getSaveFileName(
            self,
            "Export chat",
            str(Path.home() / f"{name or 'chat'}{suffix}"),
            "JSON (*.json)" if kind == "json" else "Markdown (*.md)",
        )
        if path:
            self.export_conversation(conv_id, Path(path))

    def export_conversation(self, conv_id: int, path: Path) -> Path | None:
        conv = self.storage.conversation(conv_id)
        if conv is None:
            return None
        try:
            out = write_export(path, conv, self.storage.messages(conv_id))
        except OSError as exc:
            self.banner.show_message(f"Export failed: {exc}")
            return None
        self.status_label.setText(f"Exported to {out}")
        return out

    # ----- system prompt ----------------------------------------------------------------------

    def _toggle_system(self, shown: bool) -> None:
        self.system_edit.setVisible(shown)
        if shown:
            self.system_edit.setFocus()

    @_guarded
    def _save_system_prompt(self) -> None:
        text = self.system_edit.toPlainText()
        if self.current_conv is None:
            if not text.strip():
                return
            self.current_conv = self.storage.create_conversation()
            self.refresh_conversations()
        self.storage.set_system_prompt(self.current_conv, text)
        self.system_button.setText("System prompt ✓" if text.strip() else "System prompt")

    def _flush_system_prompt(self) -> None:
        if self._system_timer.isActive():
            self._system_timer.stop()
            self._save_system_prompt()

    def set_system_prompt(self, text: str) -> None:
        self.system_edit.setPlainText(text)
        self._flush_system_prompt()

    # ----- sending and answers ----------------------------------------------------------------

    def send_message(self, text: str) -> bool:
        """Send `text` (or resend an edited message). False when nothing was started."""
        text = text.strip()
        if not text or self.active is not None:
            return False
        self._flush_system_prompt()
        try:
            if self.current_conv is None:
                self.current_conv = self.storage.create_conversation()
            conv = self.storage.conversation(self.current_conv)
            if self.editing_id is not None:
                self.storage.update_message(self.editing_id, text)
                self.storage.delete_messages_after(self.current_conv, self.editing_id)
                self.editing_id = None
                self.composer.set_editing(False)
            else:
                self.storage.add_message(self.current_conv, "user", text)
            if conv is not None and conv.title == DEFAULT_TITLE:
                first = text.splitlines()[0]
                title = first[:TITLE_CHARS] + ("…" if len(first) > TITLE_CHARS else "")
                self.storage.rename_conversation(self.current_conv, title)
                self.title_label.setText(title)
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return False
        self.composer.input.clear()
        self.render_conversation()
        self.refresh_conversations()
        self._start_answer()
        return True

    @_guarded
    def _start_answer(self) -> None:
        conv_id = self.current_conv
        conv = self.storage.conversation(conv_id)
        messages = [{"role": m.role, "content": m.content} for m in self._messages(conv_id)]
        if conv is not None and conv.system_prompt.strip():
            messages.insert(0, {"role": "system", "content": conv.system_prompt.strip()})
        request = GenerationRequest(messages, self.settings.generation_settings())
        widget = self._add_widget("assistant", "", None, None)
        if self.server_job is not None:
            widget.set_status("waiting for the local server…")  # one engine: it takes turns
        else:
            ready = self.engine_state == "ready"
            widget.set_status("thinking…" if ready else "waiting for the model…")
        self.active = ActiveAnswer(request, conv_id, widget)
        self.last_steps = []
        self.banner.hide()
        self.stats.start_answer()
        self.composer.set_generating(True)
        self._update_regenerate()
        self.chat.scroll_to_bottom()
        self.host.generate(request)

    def stop(self) -> None:
        if self.active is not None:
            self.active.request.cancel.set()
            self.active.widget.set_status("stopping…")

    @_guarded
    def regenerate(self) -> None:
        if self.active is not None or self.current_conv is None:
            return
        messages = self._messages(self.current_conv)
        if not messages:
            return
        if messages[-1].role == "assistant":
            self.storage.delete_message(messages[-1].id)
            if len(messages) < 2:
                self.render_conversation()
                return
        self.render_conversation()
        self._start_answer()

    def edit_message(self, widget: MessageWidget) -> None:
        if self.active is not None or widget.message_id is None:
            return
        self.editing_id = widget.message_id
        self.composer.set_text(widget.text)
        self.composer.set_editing(True)

    def _cancel_edit(self) -> None:
        if self.editing_id is not None:
            self.editing_id = None
            self.composer.set_editing(False)
            self.composer.input.clear()

    def copy_message(self, widget: MessageWidget) -> None:
        QGuiApplication.clipboard().setText(widget.text)
        self.status_label.setText("Message copied")

    def _update_regenerate(self) -> None:
        last = self.chat.messages[-1] if self.chat.messages else None
        for w in self.chat.messages:
            w.set_regenerate_visible(w is last and self.active is None and w.message_id)
            w.set_actions_enabled(self.active is None)
        self.composer.regen_button.setEnabled(self.active is None and last is not None)

    def _mine(self, request_id: int) -> ActiveAnswer | None:
        a = self.active
        return a if a is not None and a.request.id == request_id else None

    def _on_delta(self, request_id: int, runs: list[Run]) -> None:
        a = self._mine(request_id)
        if a is None:
            return
        a.runs.extend(runs)
        a.text += "".join(t for t, _d in runs)
        if a.conv_id == self.current_conv:
            a.widget.set_text(a.text, a.runs if self.settings.tint_drafted else None)
            a.widget.set_status("writing…")

    def _on_stats(self, request_id: int, update: StatsUpdate) -> None:
        if request_id == self.server_job and self.active is None:
            self.stats.update_steps(update.steps, update.latest)  # an API request, live
            return
        a = self._mine(request_id)
        if a is None:
            return
        a.steps.extend(update.steps)
        a.latest = update.latest
        self.last_steps = a.steps
        self.stats.update_steps(update.steps, update.latest)

    def _on_finished(self, request_id: int, fin: Finished) -> None:
        a = self._mine(request_id)
        if a is None:
            return
        self.active = None
        self.last_finished = fin
        text = fin.text
        # the user may have opened another chat meanwhile: then the card is gone, only save
        shown = a.conv_id == self.current_conv and a.widget in self.chat.messages
        if text or fin.stop_reason != "cancelled":
            record = self._answer_record(a, fin)
            msg_id = None
            try:
                if self.storage.conversation(a.conv_id) is not None:  # not deleted meanwhile
                    msg_id = self.storage.add_message(a.conv_id, "assistant", text, record)
            except StorageError as exc:
                self.banner.show_message(f"The answer could not be saved: {exc}")
            if shown:
                a.widget.message_id = msg_id
                a.widget.set_text(text, a.runs if self.settings.tint_drafted else None)
                a.widget.set_footer(footer_line(record))
                a.widget.set_status("stopped" if fin.stop_reason == "cancelled" else "")
        else:
            if shown:
                self.chat.remove(a.widget)
            self.status_label.setText("Stopped before the first token.")
        self.stats.finish_answer(STOP_REASONS.get(fin.stop_reason, "") or "done")
        self.composer.set_generating(False)
        self._update_regenerate()
        self.refresh_conversations()

    def _answer_record(self, a: ActiveAnswer, fin: Finished) -> dict:
        """The stats JSON stored with the answer: totals, the last StepStats, per-step tau
        and block size (for the plot), and which text came from accepted drafts."""
        step = fin.stats.to_dict() if fin.stats else None
        info = self.engine_info
        return {
            "stop_reason": fin.stop_reason,
            "tokens": len(fin.token_ids),
            "tokens_per_s": step["tokens_per_s"] if step else 0.0,
            "tau_mean": step["tau_mean"] if step else 0.0,
            "ttft_s": step["ttft_s"] if step else 0.0,
            "elapsed_s": fin.elapsed_s,
            "prompt_tokens": fin.prompt_tokens,
            "model": info.model_id if info else None,
            "drafter": info.drafter if info else None,
            "backend": info.backend if info else None,
            "tau_steps": [c for c, _b in a.steps],
            "block_steps": [b for _c, b in a.steps],
            "runs": _compact_runs(a.runs) if "".join(t for t, _ in a.runs) == fin.text else None,
            "step": step,
        }

    def _on_error(self, request_id: int, message: str, kind: str) -> None:
        a = self._mine(request_id)
        if a is None:
            return
        self.active = None
        if a.widget in self.chat.messages:
            self.chat.remove(a.widget)
        hints = {
            "context": "The conversation no longer fits the model's context. Start a new chat, "
            "edit the message shorter, or raise the context length in Settings.",
            "model": "",
        }
        hint = hints.get(kind, "")
        self.banner.show_message(f"Could not answer: {message}" + (f"\n{hint}" if hint else ""))
        self.stats.finish_answer("error")
        self.composer.set_generating(False)
        self._update_regenerate()

    # ----- settings, models, about ------------------------------------------------------------

    def settings_dialog(self) -> SettingsDialog:
        model_id = self.engine_info.model_id if self.engine_info else self.settings.model
        dialog = SettingsDialog(self.settings, hyflash_status(model_id), backend_status(), self)
        dialog.accepted.connect(lambda: self.apply_settings(dialog.values()))
        return dialog

    def open_settings(self) -> SettingsDialog:
        dialog = self.settings_dialog()
        dialog.open()  # window-modal but not blocking: the answer keeps streaming
        return dialog

    def apply_settings(self, new: AppSettings) -> None:
        old = self.settings
        self.settings = new
        self._save_settings()
        reload = needs_reload(old, new)
        if reload:
            names = ", ".join(RELOAD_LABELS[r] for r in reload)
            self.banner.show_message(f"Reloading the model for the new {names}…", "info")
            self.host.load(engine_config(new))
            self._on_state("loading", "Reloading the model…")
        elif new.drafter != old.drafter:
            self.host.set_drafter(new.drafter)
        if (new.theme, new.font_size) != (old.theme, old.font_size):
            theme.apply_theme(QApplication.instance(), new.theme, new.font_size)
            self.stats.refresh_theme()
            self.render_conversation()
        elif new.tint_drafted != old.tint_drafted:
            self.render_conversation()
        self.tint_action.setChecked(new.tint_drafted)
        self.stats.set_block_setting(new.block_size)

    def _save_settings(self) -> None:
        try:
            self.store.save(self.settings)
        except OSError as exc:
            self.banner.show_message(f"Settings could not be saved: {exc}", "warning")

    def set_theme(self, name: str) -> None:
        self.apply_settings(replace(self.settings, theme=name))

    def _system_scheme_changed(self, _scheme) -> None:
        if self.settings.theme == "system":
            theme.apply_theme(QApplication.instance(), "system", self.settings.font_size)
            self.stats.refresh_theme()
            self.render_conversation()

    def _toggle_stats(self, shown: bool) -> None:
        self.stats.setVisible(shown)
        self.settings.show_stats = shown
        self._save_settings()

    def _toggle_tint(self, on: bool) -> None:
        if on != self.settings.tint_drafted:
            self.settings.tint_drafted = on
            self._save_settings()
            self.render_conversation()

    def open_model_manager(self):
        from app.model_manager import ModelManager
        from engine.backends import probe

        current = self.engine_info.model_id if self.engine_info else self.settings.model
        dialog = ModelManager(current, probe().ram_bytes, self)
        dialog.modelChosen.connect(self.use_model)
        dialog.show()
        return dialog

    def use_model(self, model_id: str) -> None:
        self.apply_settings(replace(self.settings, model=model_id))

    def open_about(self) -> AboutDialog:
        dialog = AboutDialog(self.engine_info, self)
        dialog.open()
        return dialog

    # ----- local server -----------------------------------------------------------------------

    def _build_server(self) -> None:
        self.server_job: int | None = None  # the worker's request id of a running API request
        self.server = LocalServerController(self.host, self)
        self.server_panel = ServerPanel(self.settings.server_port, self)
        self.server_panel.switchToggled.connect(self.set_server_enabled)
        self.server.stateChanged.connect(self._on_server_state)
        self.server.requestLogged.connect(self.server_panel.add_request)
        if self.settings.server_enabled:
            self.set_server_enabled(True, self.settings.server_port)

    def open_server_panel(self) -> ServerPanel:
        self.server_panel.show()
        self.server_panel.raise_()
        return self.server_panel

    def set_server_enabled(self, on: bool, port: int | None = None) -> bool:
        """Start (on `port`, else the saved one) or stop the Local server; remembered."""
        if on:
            port = self.settings.server_port if port is None else port
            if not self.server.start(port, self.settings.block_size):
                return False
            self.settings.server_port = port
        else:
            self.server.stop()
        self.settings.server_enabled = on
        self._save_settings()
        return True

    def _on_server_state(self, running: bool, message: str) -> None:
        self.server_panel.set_running(running, message)
        self.server_label.setText(f"API: {message}")
        self.server_label.setVisible(running)
        if not running and message != "Stopped":
            self.banner.show_message(f"Local server: {message}", "warning")

    def _on_server_job_started(self, request_id: int, label: str) -> None:
        self.server_job = request_id
        self.server_label.setText(f"API busy: {label}")
        self.server_panel.set_busy(label)
        if self.active is None:
            self.stats.start_answer()
        else:  # the window's answer waits for its turn
            self.active.widget.set_status("waiting for the local server…")

    def _on_server_job_ended(self, _request_id: int) -> None:
        self.server_job = None
        self.server_label.setText(f"API: {self.server.url}")
        self.server_panel.set_busy(None)
        if self.active is None:
            self.stats.finish_answer("API request")
        else:
            self.active.widget.set_status("thinking…")

    # ----- closing ----------------------------------------------------------------------------

    def closeEvent(self, event) -> None:  # noqa: N802
        self._flush_system_prompt()
        if self.active is not None:
            # let the stopped answer arrive so its partial text is saved
            self.stop()
            deadline = time.monotonic() + 5.0
            while self.active is not None and time.monotonic() < deadline:
                QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        for signal, slot in self._connections:
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        self._connections = []
        self.server.stop()  # before the engine goes: cancels and refuses API requests
        try:
            QGuiApplication.styleHints().colorSchemeChanged.disconnect(self._system_scheme_changed)
        except (RuntimeError, TypeError):
            pass
        if self.owns_host:
            self.host.shutdown()
        self.storage.close()
        super().closeEvent(event)


def needs_reload_config(have: EngineConfig, want: EngineConfig) -> bool:
    fields = ("model", "n_ctx", "n_threads", "backend", "extra_bufts", "verify_mode")
    return any(getattr(have, f) != getattr(want, f) for f in fields)

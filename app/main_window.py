"""The main window: lays out the chat list, the chat and the stats panel, and wires them to
their helpers (app.conversations, app.generation, app.engine_link, app.server_link, app.menus).
It keeps which message is being edited. Model work happens on the EngineHost's thread; all here
runs on the UI thread and only does quick things (render, SQLite writes)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEventLoop
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QProgressBar,
    QSplitter,
)

from app import APP_DISPLAY_NAME, theme
from app.about import AboutDialog
from app.banner import guarded
from app.capabilities import backend_status, draft_models, hyflash_status
from app.chat_pane import ChatPane
from app.chat_view import MessageWidget
from app.conversations import Conversations
from app.engine_link import EngineLink
from app.format import CONTEXT_HINT, STOP_REASONS, footer_line
from app.generation import ActiveAnswer, AnswerController
from app.markdown import Run
from app.menus import build_menus
from app.server_link import ServerLink
from app.server_panel import ServerPanel
from app.settings import DRAFTERS, AppSettings, SettingsStore, checked, needs_reload
from app.settings_dialog import RELOAD_LABELS, SettingsDialog
from app.sidebar import Sidebar
from app.stats_panel import StatsPanel
from app.storage import Storage, StorageError, expand_runs
from app.worker import EngineHost
from engine.events import ErrorKind, Finished


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
        self.editing_id: int | None = None

        theme.apply_theme(QApplication.instance(), self.settings.theme, self.settings.font_size)
        self._build()
        self.menu_actions = build_menus(self)

        startup = [m for m in (settings_message, self.storage.recovery_message) if m]
        if startup:
            self.banner.show_message("\n".join(startup), "warning")

        self.owns_host = host is None
        self.host = host or EngineHost()
        self.answers = AnswerController(
            self.host, self.storage, lambda: self.engine_link.info, self
        )
        self._connect_engine()
        self.engine_link.sync(self.settings)
        self._build_server()

        QGuiApplication.styleHints().colorSchemeChanged.connect(self._system_scheme_changed)
        self.chats.refresh()
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
        self.sidebar.deleteRequested.connect(lambda cid: self.delete_conversation(cid, True))

        self.pane = ChatPane()
        self.pane.copyRequested.connect(self.copy_message)
        self.pane.editRequested.connect(self.edit_message)
        self.pane.regenerateRequested.connect(self.regenerate)
        self.banner, self.chat, self.composer = self.pane.banner, self.pane.chat, self.pane.composer
        self.composer.sendRequested.connect(self.send_message)
        self.composer.stopRequested.connect(self.stop)
        self.composer.regenerateRequested.connect(self.regenerate)
        self.composer.editCancelled.connect(self._cancel_edit)

        self.stats = StatsPanel()
        self.stats.setVisible(self.settings.show_stats)
        self.stats.set_block_setting(self.settings.block_size)

        split = QSplitter()
        split.setChildrenCollapsible(False)
        split.setHandleWidth(1)
        for part in (self.sidebar, self.pane, self.stats):
            split.addWidget(part)
        split.setStretchFactor(1, 1)
        split.setSizes([240, 700, 340])
        self.setCentralWidget(split)
        self._build_status_bar()
        self.chats = Conversations(self.storage, self.sidebar, self.pane, self.status_label, self)
        self.sidebar.renameRequested.connect(lambda cid: self.chats.rename(cid))
        self.sidebar.exportRequested.connect(self.chats.export_dialog)
        self.sidebar.searchChanged.connect(lambda _t: self.chats.refresh())
        self.pane.systemPromptEdited.connect(self.chats.save_system_prompt)

    def _build_status_bar(self) -> None:
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setFixedWidth(120)
        self.busy.setVisible(False)
        self.statusBar().addPermanentWidget(self.busy)
        self.status_label = QLabel()
        self.statusBar().addWidget(self.status_label, 1)

    # ----- engine -----------------------------------------------------------------------------

    def _connect_engine(self) -> None:
        self.engine_link = EngineLink(
            self.host, self.pane, self.stats, self.status_label, self.busy, self
        )
        self.engine_link.drafterChanged.connect(self._on_drafter_changed)
        a = self.answers
        a.textArrived.connect(self._show_answer_text)
        a.stepsArrived.connect(lambda update: self.stats.update_steps(update.steps, update.latest))
        a.saveFailed.connect(self.banner.show_message)
        a.answerFinished.connect(self._show_finished_answer)
        a.answerFailed.connect(self._show_failed_answer)

    def _on_drafter_changed(self, name: str) -> None:
        if name in DRAFTERS and name != self.settings.drafter:
            self.settings.drafter = name  # the settings tell what really runs
            self._save_settings()

    # ----- conversations ----------------------------------------------------------------------

    @guarded
    def new_conversation(self) -> None:
        if self.chats.current is not None and not self.chats.messages(self.chats.current):
            self.open_conversation(self.chats.current)  # reuse an empty chat, don't pile up
            return
        self._cancel_edit()
        self.chats.current = self.storage.create_conversation()
        self.chats.refresh()
        self.open_conversation(self.chats.current)
        self.composer.input.setFocus()

    @guarded
    def open_conversation(self, conv_id: int) -> None:
        conv = self.storage.conversation(conv_id)
        if conv is None:
            return
        self.pane.flush_system_prompt()
        self._cancel_edit()
        self.chats.current = conv_id
        self.pane.show_chat(conv.title, conv.system_prompt)
        self.render_conversation()
        self.sidebar.set_conversations(
            self.storage.list_conversations(self.sidebar.search.text()), conv_id
        )

    def render_conversation(self, hide: frozenset[int] = frozenset()) -> None:
        """The chat's saved messages (but `hide`), and the answer streaming into it."""
        self.chat.clear()
        if self.chats.current is None:
            self._update_regenerate()
            return
        last_record = None
        active = self.answers.active
        # the answer streaming here is shown from memory below, in place of the one it
        # regenerates (kept on disk until the new one is saved)
        hidden = set(hide) | ({active.message_id, active.replaces} if active is not None else set())
        for m in self.chats.messages(self.chats.current):
            if m.id in hidden:
                continue
            runs = expand_runs(m.content, (m.stats or {}).get("runs"))
            widget = self._add_widget(m.role, m.content, m.id, runs)
            if m.unfinished:
                widget.set_status("unfinished")
            elif m.role == "assistant" and m.stats:
                widget.set_footer(footer_line(m.stats))
                last_record = m.stats
        if active is not None and active.conv_id == self.chats.current:
            # an answer still streaming into this chat: show it again
            active.widget = self._add_widget("assistant", active.text, None, active.runs)
            active.widget.set_status("writing…")
        self._update_regenerate()
        if active is None:
            self.stats.show_saved(last_record)
        self.chat.scroll_to_bottom()

    def _tint(self, runs: list[Run] | None) -> list[Run] | None:
        """The runs to tint with, or None when the user turned tinting off."""
        return runs if self.settings.tint_drafted else None

    def _add_widget(
        self, role: str, text: str, message_id: int | None, runs: list[Run] | None
    ) -> MessageWidget:
        return self.pane.add_card(role, text, self.settings.font_size, message_id, self._tint(runs))

    def rename_conversation(self, conv_id: int, title: str | None = None) -> None:
        self.chats.rename(conv_id, title)  # None: ask the user

    def export_conversation(self, conv_id: int, path: Path) -> Path | None:
        return self.chats.export(conv_id, path)

    @guarded
    def delete_conversation(self, conv_id: int, confirm: bool = False) -> None:
        if confirm and not self.chats.confirm_delete():
            return
        if self.answers.active is not None and self.answers.active.conv_id == conv_id:
            self.stop()
        self.chats.delete(conv_id)

    def set_system_prompt(self, text: str) -> None:
        self.pane.system_edit.setPlainText(text)
        self.pane.flush_system_prompt()

    # ----- sending and answers ----------------------------------------------------------------

    def send_message(self, text: str) -> bool:
        """Send `text` (or resend an edited message). False when nothing was started."""
        text = text.strip()
        if not text or self.answers.active is not None:
            return False
        self.pane.flush_system_prompt()
        try:
            if self.chats.current is None:
                self.chats.current = self.storage.create_conversation()
            title = self.storage.add_user_message(self.chats.current, text, self.editing_id)
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return False
        if self.editing_id is not None:
            self.editing_id = None
            self.composer.set_editing(False)
        if title is not None:
            self.pane.title_label.setText(title)
        self.composer.input.clear()
        self.render_conversation()
        self.chats.refresh()
        self._start_answer()
        return True

    @guarded
    def _start_answer(self, replaces: int | None = None) -> None:
        conv_id = self.chats.current
        conv = self.storage.conversation(conv_id)
        messages = [
            {"role": m.role, "content": m.content}
            for m in self.chats.messages(conv_id)
            if m.id != replaces and m.replaces is None  # not unfinished alternatives either
        ]
        if conv is not None and conv.system_prompt.strip():
            messages.insert(0, {"role": "system", "content": conv.system_prompt.strip()})
        widget = self._add_widget("assistant", "", None, None)
        if self.answers.server_job is not None:
            widget.set_status("waiting for the local server…")  # one engine: it takes turns
        else:
            ready = self.engine_link.state == "ready"
            widget.set_status("thinking…" if ready else "waiting for the model…")
        # queued to the worker thread: nothing arrives before this method returns
        self.answers.start(messages, self.settings, conv_id, widget, replaces)
        self.banner.hide()
        self.stats.start_answer()
        self.composer.set_generating(True)
        self._update_regenerate()
        self.chat.scroll_to_bottom()

    def stop(self) -> None:
        if self.answers.stop():
            self.answers.active.widget.set_status("stopping…")

    @guarded
    def regenerate(self) -> None:
        if self.answers.active is not None or self.chats.current is None:
            return
        messages = self.chats.messages(self.chats.current)
        if not messages:
            return
        replaces = messages[-1].id if messages[-1].role == "assistant" else None
        if replaces is not None and len(messages) < 2:
            return  # an answer to no question
        self.render_conversation(
            hide=frozenset({replaces}) if replaces is not None else frozenset()
        )
        self._start_answer(replaces)  # the old answer stays on disk until the new one is saved

    def edit_message(self, widget: MessageWidget) -> None:
        if self.answers.active is not None or widget.message_id is None:
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
        self.pane.update_regenerate(answering=self.answers.active is not None)

    def _show_answer_text(self, a: ActiveAnswer) -> None:
        if a.conv_id == self.chats.current:
            a.widget.stream_text(a.text, self._tint(a.runs))
            a.widget.set_status("writing…")

    def _show_finished_answer(
        self, a: ActiveAnswer, fin: Finished, record: dict | None, msg_id: int | None
    ) -> None:
        # the user may have opened another chat meanwhile: then the card is gone, only saved
        shown = a.conv_id == self.chats.current and a.widget in self.chat.messages
        if record is None:  # stopped before the first token: nothing was saved
            if shown:
                self.chat.remove(a.widget)
                if a.replaces is not None:
                    self.render_conversation()  # the old answer is the answer again
            self.status_label.setText("Stopped before the first token.")
        elif shown:
            a.widget.message_id = msg_id
            a.widget.set_text(fin.text, self._tint(a.runs))
            a.widget.set_footer(footer_line(record))
            a.widget.set_status("stopped" if fin.stop_reason == "cancelled" else "")
        self.stats.finish_answer(STOP_REASONS.get(fin.stop_reason, "") or "done")
        self.composer.set_generating(False)
        self._update_regenerate()
        self.chats.refresh()

    def _show_failed_answer(self, a: ActiveAnswer, message: str, kind: ErrorKind) -> None:
        if a.widget in self.chat.messages:
            self.chat.remove(a.widget)
        if a.conv_id == self.chats.current:
            self.render_conversation()  # the old answer, or what was written, marked unfinished
        hint = CONTEXT_HINT if kind == "context" else ""
        self.banner.show_message(f"Could not answer: {message}" + (f"\n{hint}" if hint else ""))
        self.stats.finish_answer("error")
        self.composer.set_generating(False)
        self._update_regenerate()

    # ----- settings, models, about ------------------------------------------------------------

    def settings_dialog(self) -> SettingsDialog:
        model_id = self.engine_link.info.model_id if self.engine_link.info else self.settings.model
        dialog = SettingsDialog(
            self.settings,
            hyflash_status(model_id),
            backend_status(),
            self,
            draft_models=draft_models(model_id),
        )
        dialog.accepted.connect(lambda: self.apply_settings(dialog.values()))
        return dialog

    def open_settings(self) -> SettingsDialog:
        dialog = self.settings_dialog()
        dialog.open()  # window-modal but not blocking: the answer keeps streaming
        return dialog

    def apply_settings(self, new: AppSettings) -> None:
        new, problem = checked(new)  # a bad value falls back to its default, the rest applies
        old = self.settings
        self.settings = new
        self._save_settings()
        notices = [problem] if problem else []
        reload = needs_reload(old, new)
        if reload:
            names = ", ".join(RELOAD_LABELS[r] for r in reload)
            notices.append(f"Reloading the model for the new {names}…")
            self.engine_link.reload(new)
        elif new.drafter != old.drafter:
            self.engine_link.set_drafter(new.drafter)
        if notices:
            self.banner.show_message("\n".join(notices), "warning" if problem else "info")
        if (new.theme, new.font_size) != (old.theme, old.font_size):
            theme.apply_theme(QApplication.instance(), new.theme, new.font_size)
            self.stats.refresh_theme()
            self.render_conversation()
        elif new.tint_drafted != old.tint_drafted:
            self.render_conversation()
        self.menu_actions.tint.setChecked(new.tint_drafted)
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

    def show_stats(self, shown: bool) -> None:
        self.stats.setVisible(shown)
        self.settings.show_stats = shown
        self._save_settings()

    def set_tint(self, on: bool) -> None:
        if on != self.settings.tint_drafted:
            self.settings.tint_drafted = on
            self._save_settings()
            self.render_conversation()

    def open_model_manager(self):
        from app.model_manager import ModelManager
        from engine.llama.backends import probe

        # the settings' id first: a file's path (the loaded engine knows it by its stem)
        info = self.engine_link.info
        current = self.settings.model or (info.model_id if info else None)
        dialog = ModelManager(current, probe().ram_bytes, self, settings=self.settings)
        dialog.modelChosen.connect(self.use_model)
        dialog.sourcesChanged.connect(self.set_model_sources)
        dialog.show()
        return dialog

    def use_model(self, model_id: str) -> None:
        self.apply_settings(replace(self.settings, model=model_id))

    def set_model_sources(self, files: tuple[str, ...], folders: tuple[str, ...]) -> None:
        """The GGUF files and folders the model manager lists, remembered (no reload)."""
        self.apply_settings(replace(self.settings, model_files=files, model_folders=folders))

    def open_about(self) -> AboutDialog:
        dialog = AboutDialog(self.engine_link.info, self)
        dialog.open()
        return dialog

    # ----- local server -----------------------------------------------------------------------

    def _build_server(self) -> None:
        s = self.settings
        link = ServerLink(
            self.host,
            self.answers,
            self.stats,
            self.banner,
            s.server_port,
            self,
            lan=s.server_lan,
            key=s.server_key,
        )
        self.server, self.server_panel, self.server_label = link.server, link.panel, link.label
        self.server_panel.switchToggled.connect(self.set_server_enabled)
        self.server_panel.accessChanged.connect(self.set_server_access)
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
            s = self.settings
            if not self.server.start(port, s.block_size, s.server_lan, s.server_key):
                return False
            self.settings.server_port = port
        else:
            self.server.stop()
        self.settings.server_enabled = on
        self._save_settings()
        return True

    def set_server_access(self, lan: bool, key: str) -> None:
        """Who may use the Local server from its next start: other devices (with `key`) or
        this computer only; remembered."""
        self.settings.server_lan, self.settings.server_key = lan, key
        self._save_settings()

    # ----- closing ----------------------------------------------------------------------------

    def closeEvent(self, event) -> None:  # noqa: N802
        self.pane.flush_system_prompt()
        if self.answers.active is not None:
            # let the stopped answer arrive so its partial text is saved
            self.stop()
            deadline = time.monotonic() + 5.0
            while self.answers.active is not None and time.monotonic() < deadline:
                QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        self.answers.disconnect_host()
        self.engine_link.disconnect_host()
        self.server.stop()  # before the engine goes: cancels and refuses API requests
        try:
            QGuiApplication.styleHints().colorSchemeChanged.disconnect(self._system_scheme_changed)
        except (RuntimeError, TypeError):
            pass
        if self.owns_host:
            self.host.shutdown()
        self.storage.close()
        super().closeEvent(event)

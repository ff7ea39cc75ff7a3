"""The chat list's side of the main window: which chat is open, and creating, renaming,
deleting and exporting chats and saving their system prompts. Storage failures show in the
banner; the window renders the messages."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QInputDialog, QLabel, QMessageBox, QWidget

from app.banner import guarded
from app.chat_pane import ChatPane
from app.export import write_export
from app.sidebar import Sidebar
from app.storage import DEFAULT_TITLE, Message, Storage, StorageError


class Conversations(QObject):
    def __init__(
        self,
        storage: Storage,
        sidebar: Sidebar,
        pane: ChatPane,
        status_label: QLabel,
        window: QWidget,
    ) -> None:
        super().__init__(window)
        self.storage, self.sidebar, self.pane = storage, sidebar, pane
        self.banner, self.status_label, self.window = pane.banner, status_label, window
        self.current: int | None = None  # the open chat's id

    def refresh(self) -> None:
        """The sidebar's list again (after a change, or when the search text changes)."""
        try:
            convs = self.storage.list_conversations(self.sidebar.search.text())
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return
        self.sidebar.set_conversations(convs, self.current)

    def messages(self, conv_id: int) -> list[Message]:
        try:
            return self.storage.messages(conv_id)
        except StorageError as exc:
            self.banner.show_message(str(exc))
            return []

    @guarded
    def rename(self, conv_id: int, title: str | None = None) -> None:
        """Rename chat `conv_id` to `title`, or to what the user types when it is None."""
        if title is None:
            conv = self.storage.conversation(conv_id)
            title, ok = QInputDialog.getText(
                self.window, "Rename chat", "Title:", text=conv.title if conv else ""
            )
            if not ok:
                return
        if not title.strip():
            return
        self.storage.rename_conversation(conv_id, title.strip())
        if conv_id == self.current:
            self.pane.title_label.setText(title.strip())
        self.refresh()

    def confirm_delete(self) -> bool:
        answer = QMessageBox.question(
            self.window, "Delete chat", "Delete this chat and all its messages?"
        )
        return answer == QMessageBox.StandardButton.Yes

    def delete(self, conv_id: int) -> None:
        """Delete chat `conv_id` (StorageError goes to the caller, which shows it)."""
        self.storage.delete_conversation(conv_id)
        if conv_id == self.current:
            self.current = None
            self.pane.chat.clear()
            self.pane.title_label.setText(DEFAULT_TITLE)
            self.pane.system_edit.clear()
        self.refresh()

    @guarded
    def export_dialog(self, conv_id: int | None, kind: str) -> None:
        """Ask where to export chat `conv_id` as "md" or "json", then export it."""
        conv = self.storage.conversation(conv_id) if conv_id is not None else None
        if conv is None:
            return
        suffix = ".json" if kind == "json" else ".md"
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in conv.title).strip()
        path, _ = QFileDialog.getSaveFileName(
            self.window,
            "Export chat",
            str(Path.home() / f"{name or 'chat'}{suffix}"),
            "JSON (*.json)" if kind == "json" else "Markdown (*.md)",
        )
        if path:
            self.export(conv_id, Path(path))

    def export(self, conv_id: int, path: Path) -> Path | None:
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

    @guarded
    def save_system_prompt(self, text: str) -> None:
        """Save the open chat's system prompt; typing one with no chat open starts a chat."""
        if self.current is None:
            if not text.strip():
                return
            self.current = self.storage.create_conversation()
            self.refresh()
        self.storage.set_system_prompt(self.current, text)
        self.pane.mark_system_prompt(bool(text.strip()))

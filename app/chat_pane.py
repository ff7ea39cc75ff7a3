"""The middle column of the main window: the chat's header, its system prompt, the message
banner, the messages and the composer. Layout only; the window decides what goes in."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.banner import Banner
from app.chat_view import ChatView, MessageWidget
from app.composer import Composer
from app.elided_label import ElidedLabel
from app.markdown import Run
from app.storage import DEFAULT_TITLE

# Saving the system prompt waits for a pause in typing, not for every key.
SYSTEM_SAVE_DELAY_MS = 400


def _padded(widget: QWidget) -> QWidget:
    """`widget` with the column's side margins, so it lines up with the messages."""
    box = QWidget()
    col = QVBoxLayout(box)
    col.setContentsMargins(24, 8, 24, 0)
    col.addWidget(widget)
    return box


class ChatPane(QWidget):
    systemPromptEdited = Signal(str)  # the text, once typing has paused
    # a message card's buttons: copy and edit (the card), regenerate (the last answer)
    copyRequested = Signal(object)
    editRequested = Signal(object)
    regenerateRequested = Signal()

    def __init__(self) -> None:
        super().__init__()
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        col.addWidget(self._header())
        col.addWidget(_padded(self._system_prompt_editor()))
        self.banner = Banner()
        col.addWidget(_padded(self.banner))
        self.chat = ChatView()
        col.addWidget(self.chat, 1)
        self.composer = Composer()
        col.addWidget(self.composer)

    def _header(self) -> QWidget:
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
        self.system_button.toggled.connect(self._toggle_system_prompt)
        row.addWidget(self.title_label, 1)
        row.addSpacing(12)
        row.addWidget(self.model_label)
        row.addSpacing(10)
        row.addWidget(self.system_button)
        return header

    def _system_prompt_editor(self) -> QPlainTextEdit:
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
        self._system_timer.timeout.connect(self._emit_system_prompt)
        self.system_edit.textChanged.connect(self._system_timer.start)
        return self.system_edit

    def _toggle_system_prompt(self, shown: bool) -> None:
        self.system_edit.setVisible(shown)
        if shown:
            self.system_edit.setFocus()

    def _emit_system_prompt(self) -> None:
        self.systemPromptEdited.emit(self.system_edit.toPlainText())

    def flush_system_prompt(self) -> None:
        """Send an edit still waiting for its pause now (before the chat changes or closes)."""
        if self._system_timer.isActive():
            self._system_timer.stop()
            self._emit_system_prompt()

    def show_chat(self, title: str, system_prompt: str) -> None:
        """Show another chat's title and system prompt (not an edit: nothing is saved)."""
        self.title_label.setText(title)
        self.system_edit.blockSignals(True)
        self.system_edit.setPlainText(system_prompt)
        self.system_edit.blockSignals(False)
        self.mark_system_prompt(bool(system_prompt))

    def mark_system_prompt(self, has_prompt: bool) -> None:
        """A tick on the button tells a chat has a system prompt while the editor is hidden."""
        self.system_button.setText("System prompt ✓" if has_prompt else "System prompt")

    def add_card(
        self,
        role: str,
        text: str,
        font_size: int,
        message_id: int | None,
        runs: list[Run] | None,
    ) -> MessageWidget:
        """A message card at the end of the chat, its buttons forwarded as the pane's signals."""
        widget = self.chat.add_message(role, text, font_size, message_id, runs)
        widget.copyRequested.connect(self.copyRequested.emit)
        widget.editRequested.connect(self.editRequested.emit)
        widget.regenerateRequested.connect(lambda _w: self.regenerateRequested.emit())
        return widget

    def update_regenerate(self, answering: bool) -> None:
        """Regenerate sits on the last saved card only; while an answer is being written no
        card can be edited or regenerated."""
        last = self.chat.messages[-1] if self.chat.messages else None
        for w in self.chat.messages:
            w.set_regenerate_visible(w is last and not answering and w.message_id)
            w.set_actions_enabled(not answering)
        self.composer.regen_button.setEnabled(not answering and last is not None)

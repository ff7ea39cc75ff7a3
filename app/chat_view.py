"""The conversation view: message cards with Markdown prose, code blocks and action buttons.

Each card splits its Markdown into prose and fenced code (app.markdown). Prose goes to an
auto-height QTextBrowser via Qt's own CommonMark parser; code goes to a monospace block with
a Copy button. While streaming only the blocks that changed are re-rendered, so a 30 Hz
update costs one small document, not the whole conversation.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QGuiApplication, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QScrollArea,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import theme
from app.markdown import Block, Run, drafted_spans, run_pieces, split_blocks

STICK_MARGIN_PX = 48  # "at the bottom" tolerance for auto-scroll while streaming


def _flat_button(text: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setObjectName("Flat")
    button.setText(text)
    button.setToolTip(tip)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    return button


class _PassWheel:
    """Inner text widgets must not swallow the wheel: the chat scroll area scrolls."""

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt override
        event.ignore()


class MarkdownBlock(_PassWheel, QTextBrowser):
    """Read-only rich text whose height follows its document (no inner scrolling)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setOpenExternalLinks(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setStyleSheet("background: transparent;")
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(0)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.source_text = ""

    def set_content(self, markdown: str, runs: list[Run] | None) -> None:
        self.source_text = markdown
        self.setMarkdown(markdown)
        if runs:
            _tint_rendered(self.document(), runs)
        self._fit()

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self.document().setTextWidth(self.viewport().width())
        self._fit()

    def _fit(self, *_args) -> None:
        height = math.ceil(self.document().size().height()) + 2
        if height != self.height():
            self.setFixedHeight(height)


def _tint_rendered(doc, runs: list[Run]) -> None:
    """Tint accepted-draft runs in rendered Markdown. Rendering drops markup (`**`, `#`), so
    runs are found in order in the plain text; one that cannot be found is left untinted."""
    plain = doc.toPlainText()
    fmt = QTextCharFormat()
    fmt.setBackground(QColor(theme.colors().tint))
    pos = 0
    for text, drafted in runs:
        needle = text.strip().strip("*_`#>")
        if not needle:
            continue
        idx = plain.find(needle, pos)
        if idx < 0 or idx - pos > 64:
            continue
        if drafted:
            cursor = QTextCursor(doc)
            cursor.setPosition(idx)
            cursor.setPosition(idx + len(needle), QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(fmt)
        pos = idx + len(needle)


class CodeView(_PassWheel, QPlainTextEdit):
    def wheelEvent(self, event) -> None:  # noqa: N802 - horizontal wheel scrolls the code
        if event.angleDelta().x() != 0 and event.angleDelta().y() == 0:
            QPlainTextEdit.wheelEvent(self, event)
        else:
            event.ignore()


class CodeBlockWidget(QFrame):
    """A fenced code block: language, Copy button, monospace text that never wraps."""

    def __init__(self, font_size: int) -> None:
        super().__init__()
        self.setObjectName("CodeBlock")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 4, 6, 6)
        layout.setSpacing(2)
        header = QHBoxLayout()
        self.lang = QLabel()
        self.lang.setObjectName("CodeLang")
        self.copy_button = _flat_button("Copy", "Copy this code")
        self.copy_button.clicked.connect(self.copy)
        header.addWidget(self.lang)
        header.addStretch(1)
        header.addWidget(self.copy_button)
        layout.addLayout(header)
        self.view = CodeView()
        self.view.setReadOnly(True)
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setFont(theme.monospace_font(font_size))
        self.view.setFrameShape(QFrame.Shape.NoFrame)
        self.view.document().setDocumentMargin(2)
        layout.addWidget(self.view)
        self.code = ""

    def set_content(self, block: Block, runs: list[Run] | None) -> None:
        self.lang.setText(block.lang or "code")
        if block.text != self.code or runs:
            self.code = block.text
            self.view.setPlainText(block.text)
            if runs:  # runs are clipped to this block, so offsets are code offsets
                fmt = QTextCharFormat()
                fmt.setBackground(QColor(theme.colors().tint))
                for a, b in drafted_spans(runs, 0, len(block.text)):
                    cursor = QTextCursor(self.view.document())
                    cursor.setPosition(a)
                    cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
                    cursor.mergeCharFormat(fmt)
        self._fit()

    def _fit(self) -> None:
        metrics = self.view.fontMetrics()
        lines = max(1, self.code.count("\n") + 1)
        height = lines * metrics.lineSpacing() + 10
        widest = max((metrics.horizontalAdvance(line) for line in self.code.split("\n")), default=0)
        if widest + 12 > self.view.viewport().width():
            height += self.view.horizontalScrollBar().sizeHint().height()
        self.view.setFixedHeight(height)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit()

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.code)


class MessageWidget(QFrame):
    """One message card: role, actions (copy / edit / regenerate), body blocks, footer."""

    copyRequested = Signal(object)
    editRequested = Signal(object)
    regenerateRequested = Signal(object)

    def __init__(self, role: str, font_size: int, message_id: int | None = None) -> None:
        super().__init__()
        self.role = role
        self.message_id = message_id
        self.font_size = font_size
        self.text = ""
        self.runs: list[Run] = []
        self.setObjectName("MessageCard")
        self.setProperty("role", role)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 8, 14, 10)
        outer.setSpacing(4)
        header = QHBoxLayout()
        header.setSpacing(2)
        self.role_label = QLabel("You" if role == "user" else "Assistant")
        self.role_label.setObjectName("RoleLabel")
        self.status_label = QLabel()
        self.status_label.setObjectName("Muted")
        header.addWidget(self.role_label)
        header.addSpacing(6)
        header.addWidget(self.status_label)
        header.addStretch(1)
        self.copy_button = _flat_button("Copy", "Copy this message as Markdown")
        self.copy_button.clicked.connect(lambda: self.copyRequested.emit(self))
        self.edit_button = _flat_button("Edit", "Edit this message and send it again")
        self.edit_button.clicked.connect(lambda: self.editRequested.emit(self))
        self.regen_button = _flat_button("Regenerate", "Write this answer again")
        self.regen_button.clicked.connect(lambda: self.regenerateRequested.emit(self))
        for b in (self.edit_button, self.regen_button, self.copy_button):
            header.addWidget(b)
        self.edit_button.setVisible(role == "user")
        self.regen_button.setVisible(False)
        outer.addLayout(header)

        self.body = QVBoxLayout()
        self.body.setSpacing(6)
        outer.addLayout(self.body)
        self.footer = QLabel()
        self.footer.setObjectName("Footer")
        self.footer.setVisible(False)
        self.footer.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.footer)
        self._blocks: list[tuple[Block, list[Run] | None, QWidget]] = []

    # ----- content ----------------------------------------------------------------------------

    def set_text(self, text: str, runs: list[Run] | None = None) -> None:
        """Show `text`; `runs` (text, drafted) covering it tints accepted drafts when given.
        Blocks whose text and runs did not change are left alone."""
        self.text = text
        self.runs = runs or []
        blocks = split_blocks(text)
        for i, block in enumerate(blocks):
            end = block.start + len(block.text)
            pieces = run_pieces(runs, block.start, end) if runs else None
            if i < len(self._blocks):
                old, old_pieces, widget = self._blocks[i]
                if old.kind == block.kind:
                    if old != block or old_pieces != pieces:
                        self._fill(widget, block, pieces)
                        self._blocks[i] = (block, pieces, widget)
                    continue
                self._drop_from(i)
            widget = MarkdownBlock() if block.kind == "text" else CodeBlockWidget(self.font_size)
            self.body.addWidget(widget)
            self._fill(widget, block, pieces)
            self._blocks.append((block, pieces, widget))
        self._drop_from(len(blocks))

    @staticmethod
    def _fill(widget: QWidget, block: Block, pieces: list[Run] | None) -> None:
        if isinstance(widget, MarkdownBlock):
            widget.set_content(block.text, pieces)
        else:
            widget.set_content(block, pieces)

    def _drop_from(self, index: int) -> None:
        for _block, _pieces, widget in self._blocks[index:]:
            self.body.removeWidget(widget)
            widget.deleteLater()
        del self._blocks[index:]

    def set_footer(self, text: str) -> None:
        self.footer.setText(text)
        self.footer.setVisible(bool(text))

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def set_error(self, message: str) -> None:
        self.setProperty("state", "error")
        self.style().unpolish(self)
        self.style().polish(self)
        self.set_text(message)
        self.set_status("error")

    def set_regenerate_visible(self, visible: bool) -> None:
        self.regen_button.setVisible(visible and self.role == "assistant")

    def set_actions_enabled(self, enabled: bool) -> None:
        self.edit_button.setEnabled(enabled)
        self.regen_button.setEnabled(enabled)

    def code_blocks(self) -> list[CodeBlockWidget]:
        return [w for _b, _p, w in self._blocks if isinstance(w, CodeBlockWidget)]

    def rendered_text(self) -> str:
        parts = []
        for _block, _pieces, widget in self._blocks:
            if isinstance(widget, MarkdownBlock):
                parts.append(widget.toPlainText())
            else:
                parts.append(widget.code)
        return "\n".join(parts)


class ChatView(QScrollArea):
    """A scrollable column of message cards that sticks to the bottom while streaming."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("ChatArea")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        container = QWidget()
        self.column = QVBoxLayout(container)
        self.column.setContentsMargins(24, 16, 24, 16)
        self.column.setSpacing(12)
        self.placeholder = QLabel(
            "<div style='font-size:15pt; font-weight:600'>Ask anything.</div>"
            "<div>Answers are written by a local model on this computer, with speculative "
            "decoding: a drafter guesses tokens ahead and the model checks them all in one "
            "step.<br>Enter sends · Shift+Enter adds a line.</div>"
        )
        self.placeholder.setObjectName("Muted")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.placeholder.setMaximumWidth(560)
        self.placeholder.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.placeholder_box = QWidget()
        centered = QHBoxLayout(self.placeholder_box)
        centered.setContentsMargins(0, 80, 0, 0)
        centered.addStretch(1)
        centered.addWidget(self.placeholder, 10)
        centered.addStretch(1)
        self.column.addWidget(self.placeholder_box)
        self.column.addStretch(1)
        self.setWidget(container)
        self.messages: list[MessageWidget] = []
        self._stick = True
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scroll)

    def _on_scroll(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._stick = bar.maximum() - value <= STICK_MARGIN_PX

    def _on_range(self, _low: int, high: int) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(high)

    def clear(self) -> None:
        for widget in self.messages:
            self.column.removeWidget(widget)
            widget.deleteLater()
        self.messages.clear()
        self.placeholder_box.setVisible(True)
        self._stick = True

    def add_message(
        self,
        role: str,
        text: str,
        font_size: int,
        message_id: int | None = None,
        runs: list[Run] | None = None,
    ) -> MessageWidget:
        widget = MessageWidget(role, font_size, message_id)
        widget.set_text(text, runs)
        # cards go above the placeholder and the trailing stretch, so they stack from the top
        self.column.insertWidget(len(self.messages), widget)
        self.messages.append(widget)
        self.placeholder_box.setVisible(False)
        return widget

    def remove(self, widget: MessageWidget) -> None:
        if widget in self.messages:
            self.messages.remove(widget)
            self.column.removeWidget(widget)
            widget.deleteLater()
        self.placeholder_box.setVisible(not self.messages)

    def scroll_to_bottom(self) -> None:
        self._stick = True
        QTimer.singleShot(
            0, lambda: self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())
        )

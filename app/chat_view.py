"""The conversation view: message cards with Markdown prose, code blocks and action buttons.

Each card splits its Markdown into prose and fenced code (app.markdown). Prose goes to an
auto-height QTextBrowser via Qt's own CommonMark parser; code goes to a monospace block with
a Copy button.

While an answer streams (MessageWidget.stream_text) an update costs its new text, not the
answer: the split resumes at the open block, finished blocks are never touched, an open code
block gets its new text appended (tinted and measured alone), and an open prose block keeps
its settled paragraphs and re-renders only its open tail, at most TAIL_INTERVAL_S apart. The
end (set_text) renders in full whatever the streaming layout may show differently, so the
final card equals a full render of the answer.
"""

from __future__ import annotations

import math
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocumentFragment,
)
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
from app.markdown import (
    Block,
    Run,
    drafted_spans,
    resume_at,
    run_pieces,
    settled_end,
    split_blocks,
)

STICK_MARGIN_PX = 48  # "at the bottom" tolerance for auto-scroll while streaming
TAIL_INTERVAL_S = 0.1  # an open prose tail is re-rendered at most ~10 times a second


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
        self.partial = False  # the document is a streaming layout, not a full render
        self._settled = 0  # source_text[:_settled] is rendered as settled paragraphs
        self._tail_pos = 0  # document position where the open tail starts

    def set_content(self, markdown: str, runs: list[Run] | None) -> None:
        self.source_text = markdown
        self.partial = False
        self._settled = self._tail_pos = 0
        self.setMarkdown(markdown)
        if runs:
            _tint_rendered(self.document(), runs)
        self._fit()

    def stream_content(self, markdown: str, runs: list[Run] | None) -> None:
        """Show a prose block that is still growing: paragraphs settled since the last call
        are appended once, then only the open tail is rendered again."""
        if not markdown.startswith(self.source_text[: self._settled]):
            self.set_content(markdown, runs)
            return
        end = settled_end(markdown, self._settled)
        if end > self._settled:
            self._replace_tail(markdown[self._settled : end], _pieces(runs, self._settled, end))
            self._settled = end
            self._tail_pos = self.document().characterCount() - 1
        self._replace_tail(markdown[end:], _pieces(runs, end, len(markdown)))
        self.source_text = markdown
        self.partial = self._settled > 0
        self._fit()

    def _replace_tail(self, markdown: str, runs: list[Run] | None) -> None:
        doc = self.document()
        if self._tail_pos == 0:  # nothing settled: the tail is the whole document
            self.setMarkdown(markdown)
        else:
            cursor = QTextCursor(doc)
            cursor.setPosition(self._tail_pos)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            if markdown.strip():
                # a fresh block, so that the tail neither joins the settled part's last
                # paragraph nor inherits its list
                cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
                cursor.insertFragment(QTextDocumentFragment.fromMarkdown(markdown))
        if runs:
            _tint_rendered(doc, runs, self._tail_pos)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        # setTextWidth lays the whole document out again even at the same width, and every
        # new line of a growing answer changes the height
        if self.document().textWidth() != self.viewport().width():
            self.document().setTextWidth(self.viewport().width())
        self._fit()

    def _fit(self, *_args) -> None:
        height = math.ceil(self.document().size().height()) + 2
        if height != self.height():
            self.setFixedHeight(height)


def _pieces(runs: list[Run] | None, start: int, end: int) -> list[Run] | None:
    return run_pieces(runs, start, end) if runs else None


def _tint_rendered(doc, runs: list[Run], start: int = 0) -> None:
    """Tint accepted-draft runs in rendered Markdown from document position `start` on.
    Rendering drops markup (`**`, `#`), so runs are found in order in the plain text; one
    that cannot be found is left untinted."""
    if start == 0:
        plain = doc.toPlainText()
    else:  # only the tail's text, with toPlainText's line breaks
        cursor = QTextCursor(doc)
        cursor.setPosition(start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        plain = cursor.selectedText().replace("\u2029", "\n").replace("\u2028", "\n")
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
            cursor.setPosition(start + idx)
            cursor.setPosition(start + idx + len(needle), QTextCursor.MoveMode.KeepAnchor)
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
        self.partial = False  # never: appended text renders exactly as a full set would
        self._lines = 1  # lines of self.code
        self._widest = 0  # pixel width of its widest complete line (the last one excluded)

    def set_content(self, block: Block, runs: list[Run] | None) -> None:
        self.lang.setText(block.lang or "code")
        if block.text != self.code or runs:
            self.code = block.text
            # setPlainText would give the text the format at the old text's end (a tint)
            self.view.setPlainText("")
            spans = drafted_spans(runs, 0, len(block.text)) if runs else []
            self._append_code(block.text, spans)  # runs are clipped to this block
        self._measure(0)
        self._fit()

    def stream_content(self, block: Block, runs: list[Run] | None) -> None:
        """Show a code block that is still growing: only its new text is inserted, tinted
        and measured."""
        self.lang.setText(block.lang or "code")
        if self.code.startswith(block.text) and len(self.code) > len(block.text):
            self._cut_code(len(block.text))  # a closing fence had begun as a line of code
            return
        if not block.text.startswith(self.code):
            self.set_content(block, runs)
            return
        old = len(self.code)
        if len(block.text) > old:
            spans = drafted_spans(runs, old, len(block.text)) if runs else []
            self._append_code(block.text[old:], spans)
            self.code = block.text
            self._measure(old)
            self._fit()

    def _cut_code(self, keep: int) -> None:
        cursor = QTextCursor(self.view.document())
        cursor.setPosition(keep)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        removed, self.code = self.code[keep:], self.code[:keep]
        if "\n" in removed[1:]:  # a complete line went: measure again
            self._measure(0)
        else:
            self._lines -= removed.count("\n")
        self._fit()

    def _append_code(self, text: str, spans: list[tuple[int, int]]) -> None:
        """Insert `text` at the end, the drafted `spans` (relative to it) tinted; inserting
        with explicit formats keeps the tint of the text before from spreading."""
        cursor = QTextCursor(self.view.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        plain, tint = QTextCharFormat(), QTextCharFormat()
        tint.setBackground(QColor(theme.colors().tint))
        pos = 0
        for a, b in spans:
            if a > pos:
                cursor.insertText(text[pos:a], plain)
            cursor.insertText(text[a:b], tint)
            pos = b
        if pos < len(text):
            cursor.insertText(text[pos:], plain)

    def _measure(self, since: int) -> None:
        """Update the line count and widest complete line for the text from `since` on (0:
        all of it); the open last line is measured by _fit."""
        metrics = self.view.fontMetrics()
        start = self.code.rfind("\n", 0, since) + 1 if since else 0
        if not since:
            self._lines, self._widest = 1, 0
        done = self.code[start:].split("\n")[:-1]  # lines completed by the new text
        self._lines += len(done)
        self._widest = max([self._widest, *(metrics.horizontalAdvance(line) for line in done)])

    def _fit(self) -> None:
        metrics = self.view.fontMetrics()
        height = self._lines * metrics.lineSpacing() + 10
        last = self.code[self.code.rfind("\n") + 1 :]
        widest = max(self._widest, metrics.horizontalAdvance(last))
        if widest + 12 > self.view.viewport().width():
            height += self.view.horizontalScrollBar().sizeHint().height()
        if height != self.view.height():
            self.view.setFixedHeight(height)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit()

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.code)


def _same(old: Block, new: Block) -> bool:
    """Whether a widget showing `old` shows `new` as well (offsets and a fence's closing do
    not show)."""
    return old.text == new.text and old.lang == new.lang


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
        self._streamed = ""  # the text the last stream update parsed ("" after set_text)
        self._tail_at = 0.0  # when the open prose tail was last rendered (monotonic s)
        self._tail_timer = QTimer(self)
        self._tail_timer.setSingleShot(True)
        self._tail_timer.timeout.connect(self._show_stream)

    # ----- content ----------------------------------------------------------------------------

    def set_text(self, text: str, runs: list[Run] | None = None) -> None:
        """Show `text` in full; `runs` (text, drafted) covering it tints accepted drafts when
        given. Blocks whose text and runs did not change, and that show a full render, are
        left alone (so the end of a stream renders only what streaming left partial)."""
        self._tail_timer.stop()
        self.text = text
        self.runs = runs or []
        self._update(split_blocks(text), 0, runs, streaming=False)

    def stream_text(self, text: str, runs: list[Run] | None = None) -> None:
        """Show `text`, an answer still being written (each call extends the last one's
        text): only the open block is touched, an open prose tail at most every
        TAIL_INTERVAL_S (a timer catches up). set_text ends the stream."""
        self.text = text
        self.runs = runs or []
        self._show_stream()

    def _show_stream(self) -> None:
        text = self.text
        old = [b for b, _p, _w in self._blocks]
        resume = self._streamed and text.startswith(self._streamed)
        first = resume_at(self._streamed, old) if resume else 0
        head = old[first].head if first < len(old) else 0
        self._streamed = text
        self._update([*old[:first], *split_blocks(text, head)], first, self.runs or None, True)

    def _update(
        self, blocks: list[Block], first: int, runs: list[Run] | None, streaming: bool
    ) -> None:
        """Make blocks[first:] shown (those before are unchanged by the caller's word)."""
        for i in range(first, len(blocks)):
            block = blocks[i]
            end = block.start + len(block.text)
            pieces = run_pieces(runs, block.start, end) if runs else None
            open_tail = streaming and i == len(blocks) - 1
            if i < len(self._blocks):
                old, old_pieces, widget = self._blocks[i]
                if old.kind == block.kind:
                    if open_tail:
                        self._stream_fill(widget, block, pieces)
                    elif widget.partial or not _same(old, block) or old_pieces != pieces:
                        self._fill(widget, block, pieces)
                    self._blocks[i] = (block, pieces, widget)
                    continue
                self._drop_from(i)
            widget = MarkdownBlock() if block.kind == "text" else CodeBlockWidget(self.font_size)
            self.body.addWidget(widget)
            self._blocks.append((block, pieces, widget))
            if open_tail:
                self._stream_fill(widget, block, pieces)
            else:
                self._fill(widget, block, pieces)
        self._drop_from(len(blocks))
        if not streaming:
            self._streamed = ""

    def _stream_fill(self, widget: QWidget, block: Block, pieces: list[Run] | None) -> None:
        if isinstance(widget, CodeBlockWidget):
            widget.stream_content(block, pieces)
            return
        wait = TAIL_INTERVAL_S - (time.monotonic() - self._tail_at)
        if wait > 0:  # rendered a moment ago: the timer shows the latest text then
            widget.partial = True  # until then it shows less than its block
            if not self._tail_timer.isActive():
                self._tail_timer.start(math.ceil(wait * 1000))
            return
        widget.stream_content(block.text, pieces)
        self._tail_at = time.monotonic()

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

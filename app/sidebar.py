"""Conversation list: search, new chat, and a context menu to rename, export or delete."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.storage import Conversation


class Sidebar(QWidget):
    conversationSelected = Signal(int)
    newRequested = Signal()
    renameRequested = Signal(int)
    deleteRequested = Signal(int)
    exportRequested = Signal(int, str)  # id, "md" | "json"
    searchChanged = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("Sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        col = QVBoxLayout(self)
        col.setContentsMargins(12, 14, 12, 12)
        col.setSpacing(8)
        title = QLabel("HyFlash Chat")
        title.setObjectName("AppTitle")
        col.addWidget(title)
        self.new_button = QPushButton("+  New chat")
        self.new_button.setObjectName("Primary")
        self.new_button.clicked.connect(self.newRequested.emit)
        col.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats…")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.searchChanged.emit)
        col.addWidget(self.search)
        self.list = QListWidget()
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._selected)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setWordWrap(False)
        col.addWidget(self.list, 1)
        self._filling = False

    def set_conversations(self, conversations: list[Conversation], current: int | None) -> None:
        self._filling = True  # repopulating must not look like the user picking a chat
        self.list.clear()
        for conv in conversations:
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setToolTip(conv.title)
            self.list.addItem(item)
            if conv.id == current:
                self.list.setCurrentItem(item)
        self._filling = False

    def ids(self) -> list[int]:
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count())]

    def _selected(self, item: QListWidgetItem | None, _previous) -> None:
        if item is not None and not self._filling:
            self.conversationSelected.emit(item.data(Qt.ItemDataRole.UserRole))

    def _menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        conv_id = item.data(Qt.ItemDataRole.UserRole)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.renameRequested.emit(conv_id))
        menu.addAction("Export as Markdown…", lambda: self.exportRequested.emit(conv_id, "md"))
        menu.addAction("Export as JSON…", lambda: self.exportRequested.emit(conv_id, "json"))
        menu.addSeparator()
        menu.addAction("Delete", lambda: self.deleteRequested.emit(conv_id))
        menu.exec(self.list.mapToGlobal(pos))

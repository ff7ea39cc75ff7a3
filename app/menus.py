"""The main window's menu bar and shortcuts, each action wired to a window method."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QMenuBar

from app.conversations import Conversations
from app.settings import THEMES, AppSettings


class MenuHost(Protocol):
    """What the menus act on: the main window's commands (a protocol, so this module does not
    import the window that builds it)."""

    chats: Conversations
    settings: AppSettings

    def menuBar(self) -> QMenuBar: ...  # noqa: N802 (Qt's name)
    def addAction(self, action: QAction) -> None: ...  # noqa: N802 (Qt's name)
    def close(self) -> bool: ...
    def new_conversation(self) -> None: ...
    def open_settings(self) -> object: ...
    def show_stats(self, shown: bool) -> None: ...
    def set_tint(self, on: bool) -> None: ...
    def set_theme(self, name: str) -> None: ...
    def open_model_manager(self) -> object: ...
    def open_server_panel(self) -> object: ...
    def open_about(self) -> object: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class WindowActions:
    """The checkable actions the window keeps in step with its settings."""

    stats: QAction
    tint: QAction


def _add(
    window: MenuHost,
    menu: QMenu,
    text: str,
    slot: Callable,
    shortcut: str | None = None,
    checked: bool | None = None,
) -> QAction:
    """An action in `menu`; checkable (calling `slot` with its state) when `checked` is set."""
    action = QAction(text, window)
    if shortcut:
        action.setShortcut(QKeySequence(shortcut))
    action.setCheckable(checked is not None)
    if checked is not None:
        action.setChecked(checked)
        action.toggled.connect(slot)
    else:
        action.triggered.connect(slot)
    menu.addAction(action)
    return action


def build_menus(window: MenuHost) -> WindowActions:
    bar = window.menuBar()
    file = bar.addMenu("&File")
    _add(window, file, "New chat", window.new_conversation, "Ctrl+N")
    _add(
        window,
        file,
        "Export chat as Markdown…",
        lambda: window.chats.export_dialog(window.chats.current, "md"),
    )
    _add(
        window,
        file,
        "Export chat as JSON…",
        lambda: window.chats.export_dialog(window.chats.current, "json"),
    )
    file.addSeparator()
    _add(window, file, "Quit", window.close, "Ctrl+Q")
    edit = bar.addMenu("&Edit")
    _add(window, edit, "Settings…", window.open_settings, "Ctrl+,")
    view = bar.addMenu("&View")
    settings = window.settings
    stats = _add(window, view, "Stats panel", window.show_stats, "Ctrl+I", settings.show_stats)
    tint = _add(
        window, view, "Tint accepted draft tokens", window.set_tint, None, settings.tint_drafted
    )
    themes = view.addMenu("Theme")
    for name in THEMES:
        themes.addAction(name.capitalize(), lambda n=name: window.set_theme(n))
    models = bar.addMenu("&Models")
    _add(window, models, "Model manager…", window.open_model_manager)
    _add(window, models, "Local server…", window.open_server_panel, "Ctrl+Shift+L")
    help_menu = bar.addMenu("&Help")
    _add(window, help_menu, "About HyFlash Chat", window.open_about)
    # Esc stops the answer from anywhere in the window, not only from the composer
    stop = QAction(window)
    stop.setShortcut(QKeySequence("Esc"))
    stop.triggered.connect(window.stop)
    window.addAction(stop)
    return WindowActions(stats, tint)

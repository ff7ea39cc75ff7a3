"""Light and dark themes: a Fusion palette, one style sheet, and colours for custom painting."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication


@dataclass(frozen=True)
class Colors:
    name: str
    window: str
    surface: str  # cards, panels
    sidebar: str
    text: str
    muted: str
    border: str
    accent: str
    accent_text: str
    user_bubble: str
    code_bg: str
    tint: str  # background of accepted draft tokens
    good: str
    warn: str
    error: str
    plot_bar: str
    plot_line: str


LIGHT = Colors(
    name="light",
    window="#f4f5f8",
    surface="#ffffff",
    sidebar="#eceef3",
    text="#1d2330",
    muted="#6b7385",
    border="#d9dde6",
    accent="#3d6df2",
    accent_text="#ffffff",
    user_bubble="#e8eefe",
    code_bg="#f1f3f7",
    tint="#c9f0d9",
    good="#1f9d63",
    warn="#c98a0b",
    error="#c93838",
    plot_bar="#9db5f7",
    plot_line="#e0662d",
)

DARK = Colors(
    name="dark",
    window="#16181d",
    surface="#1f2229",
    sidebar="#1a1c22",
    text="#e4e7ee",
    muted="#8d95a8",
    border="#30343e",
    accent="#6f94ff",
    accent_text="#0d1020",
    user_bubble="#263152",
    code_bg="#14161b",
    tint="#1f5239",
    good="#3fcf8e",
    warn="#e8b339",
    error="#f06a6a",
    plot_bar="#41589c",
    plot_line="#ff9a5c",
)

_current: Colors = LIGHT


def colors() -> Colors:
    """The colours in use now (custom-painted widgets read them at paint time)."""
    return _current


def resolve(theme: str) -> Colors:
    if theme == "dark":
        return DARK
    if theme == "light":
        return LIGHT
    scheme = QGuiApplication.styleHints().colorScheme()
    return DARK if scheme == Qt.ColorScheme.Dark else LIGHT


def monospace_font(point_size: int) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setPointSize(point_size)
    return font


def _palette(c: Colors) -> QPalette:
    p = QPalette()
    role = QPalette.ColorRole
    for r, value in (
        (role.Window, c.window),
        (role.WindowText, c.text),
        (role.Base, c.surface),
        (role.AlternateBase, c.sidebar),
        (role.Text, c.text),
        (role.Button, c.surface),
        (role.ButtonText, c.text),
        (role.ToolTipBase, c.surface),
        (role.ToolTipText, c.text),
        (role.PlaceholderText, c.muted),
        (role.Highlight, c.accent),
        (role.HighlightedText, c.accent_text),
        (role.Link, c.accent),
        (role.BrightText, c.error),
    ):
        p.setColor(r, QColor(value))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.Text, role.ButtonText, role.WindowText):
        p.setColor(disabled, r, QColor(c.muted))
    return p


def style_sheet(c: Colors, font_size: int) -> str:
    small = max(font_size - 1, 7)
    return f"""
    QMainWindow, QDialog {{ background: {c.window}; }}
    QToolTip {{ color: {c.text}; background: {c.surface}; border: 1px solid {c.border};
        padding: 4px; }}
    #Sidebar {{ background: {c.sidebar}; border-right: 1px solid {c.border}; }}
    #Sidebar QListWidget {{ background: transparent; border: none; outline: none; }}
    #Sidebar QListWidget::item {{ padding: 7px 8px; border-radius: 6px; margin: 1px 0; }}
    #Sidebar QListWidget::item:selected {{ background: {c.accent}; color: {c.accent_text}; }}
    #Sidebar QListWidget::item:hover:!selected {{ background: {c.border}; }}
    #AppTitle {{ font-weight: 600; font-size: {font_size + 3}pt; }}
    #ChatHeader {{ border-bottom: 1px solid {c.border}; }}
    #ChatTitle {{ font-weight: 600; font-size: {font_size + 2}pt; }}
    #ChatArea, #ChatArea > QWidget > QWidget {{ background: {c.window}; border: none; }}
    #MessageCard {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 10px; }}
    #MessageCard[role="user"] {{ background: {c.user_bubble}; border-color: {c.user_bubble}; }}
    #MessageCard[state="error"] {{ border-color: {c.error}; }}
    #RoleLabel {{ font-weight: 600; }}
    #Footer, #Muted {{ color: {c.muted}; font-size: {small}pt; }}
    #CodeBlock {{ background: {c.code_bg}; border: 1px solid {c.border}; border-radius: 6px; }}
    #CodeBlock QPlainTextEdit {{ background: {c.code_bg}; border: none; }}
    #CodeLang {{ color: {c.muted}; font-size: {small}pt; }}
    QToolButton#Flat {{ border: none; padding: 2px 6px; color: {c.muted}; border-radius: 4px; }}
    QToolButton#Flat:hover {{ background: {c.border}; color: {c.text}; }}
    #Composer {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 10px; }}
    #Composer QPlainTextEdit {{ background: transparent; border: none; }}
    QPushButton#Primary {{ background: {c.accent}; color: {c.accent_text}; border: none;
        border-radius: 6px; padding: 6px 16px; font-weight: 600; }}
    QPushButton#Primary:disabled {{ background: {c.border}; color: {c.muted}; }}
    QPushButton#Danger {{ background: {c.error}; color: #ffffff; border: none;
        border-radius: 6px; padding: 6px 16px; font-weight: 600; }}
    #Banner {{ border-radius: 8px; padding: 2px; }}
    #Banner[level="error"] {{ background: {c.error}; }}
    #Banner[level="warning"] {{ background: {c.warn}; }}
    #Banner[level="info"] {{ background: {c.accent}; }}
    #Banner QLabel, #Banner QToolButton {{ color: #ffffff; background: transparent;
        border: none; }}
    #StatsPanel {{ background: {c.sidebar}; border-left: 1px solid {c.border}; }}
    #StatsTitle {{ font-weight: 600; font-size: {font_size + 2}pt; }}
    #Section {{ color: {c.muted}; font-size: {small}pt; font-weight: 600; }}
    #Tile {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px; }}
    #TileValue {{ font-size: {font_size + 5}pt; font-weight: 600; }}
    #TileLabel {{ color: {c.muted}; font-size: {small}pt; }}
    #Card {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px; }}
    QLineEdit, QPlainTextEdit#SystemPrompt {{ background: {c.surface};
        border: 1px solid {c.border}; border-radius: 6px; padding: 5px; }}
    QProgressBar {{ background: {c.border}; border: none; border-radius: 4px; max-height: 8px; }}
    QProgressBar::chunk {{ background: {c.accent}; border-radius: 4px; }}
    QProgressBar[level="drafter"]::chunk {{ background: {c.good}; }}
    """


def apply_theme(app: QApplication, theme: str, font_size: int) -> Colors:
    global _current
    _current = resolve(theme)
    app.setStyle("Fusion")  # the same look on every OS, and it honours our palette
    app.setPalette(_palette(_current))
    font = app.font()
    font.setPointSize(font_size)
    app.setFont(font)
    app.setStyleSheet(style_sheet(_current, font_size))
    return _current

"""About dialog: versions and what the engine is running on, and why."""

from __future__ import annotations

import html
import importlib.metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, qVersion
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout

from app import APP_DISPLAY_NAME, app_version


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def about_rows(info) -> list[tuple[str, str]]:
    """(label, value) rows; `info` is an engine EngineInfo or None when no model is loaded."""
    rows = [
        ("HyFlash Chat", app_version()),
        ("llama-cpp-python", _dist_version("llama_cpp_python")),
        ("onnxruntime", _dist_version("onnxruntime")),
        ("Qt", f"{qVersion()} (PySide6 {pyside_version})"),
    ]
    if info is None:
        rows.append(("Model", "none loaded"))
        return rows
    rows += [
        ("Model", f"{info.model_id} ({info.model_bytes / 2**20:.0f} MB)"),
        ("Model file", info.model_path),
        ("Drafter", info.drafter),
        ("Backend", info.backend),
        ("Why this backend", info.backend_reason),
        ("Context", f"{info.n_ctx} tokens, {info.n_threads} CPU threads"),
    ]
    return rows


class AboutDialog(QDialog):
    def __init__(self, info, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"About {APP_DISPLAY_NAME}")
        self.setMinimumWidth(520)
        col = QVBoxLayout(self)
        self.rows = about_rows(info)
        body = "".join(
            f"<tr><td style='padding:3px 14px 3px 0; color:gray'>{html.escape(k)}</td>"
            f"<td style='padding:3px 0'>{html.escape(v)}</td></tr>"
            for k, v in self.rows
        )
        label = QLabel(
            f"<h2>{APP_DISPLAY_NAME}</h2>"
            "<p>An offline chat with a local model. A drafter proposes blocks of tokens and the "
            "model verifies each block in one step: the answer is exactly what the model alone "
            "would write, only faster.</p>"
            f"<table>{body}</table>"
        )
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        col.addWidget(label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        buttons.accepted.connect(self.accept)
        col.addWidget(buttons)

    def text(self) -> str:
        return "\n".join(f"{k}: {v}" for k, v in self.rows)

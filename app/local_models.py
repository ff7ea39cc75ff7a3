"""The model manager's "On this computer" section: the GGUF files engine.models.discovery finds
where LM Studio, Ollama, the Hugging Face cache and llama.cpp keep them, in the person's
folders and the files they added, used in place. Each row says what its header says, whether
the kernel check has passed here and which drafter it gets; a file that cannot be used shows
why instead. "Add model file…", dropped files and "Models folders…" change what is listed;
the manager passes them on (sourcesChanged) for the settings to keep."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.capabilities import draft_model_note
from app.model_folders import FoldersDialog
from app.settings import AppSettings
from app.speedup_job import unfinished_job
from engine.drafters.spec import hyflash_status
from engine.models.catalog import load_catalog
from engine.models.discovery import Roots, kernel_verdict, scan
from engine.models.local_model import ADDED, LocalModel
from engine.units import format_size

COLUMNS = (
    "Model",
    "Found in",
    "Architecture",
    "Quantization",
    "Size",
    "Context",
    "Runs here",
    "Drafter",
    "",
)
RUNS, DRAFTER, ACTIONS = 6, 7, 8
GGUF_FILTER = "GGUF models (*.gguf)"
NOT_CHECKED_TIP = (
    "The kernel check runs once, the first time this model is used on this computer "
    "(a few seconds in a separate process)."
)


def gguf_paths(mime: QMimeData) -> list[str]:
    """The local .gguf files among dropped or pasted URLs."""
    files = [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]
    return [f for f in files if f.lower().endswith(".gguf")]


def same_file(a: str | None, b: str | None) -> bool:
    return bool(a and b) and (a == b or os.path.realpath(a) == os.path.realpath(b))


def runs_here(model: LocalModel, settings: AppSettings) -> tuple[str, str]:
    """(cell, tooltip): the kernel check's cached verdict for this file with these settings'
    threads and backend; never runs a check."""
    if model.error is not None:
        return "Cannot be used", model.error
    verdict = kernel_verdict(model.path, n_threads=settings.threads(), backend=settings.backend)
    if verdict is None:
        return "Not checked", NOT_CHECKED_TIP
    return "Yes", "\n".join(verdict.summary())


def drafter_of(model: LocalModel) -> tuple[bool, str, str]:
    """(HyFlash?, cell, tooltip): a drafter trained here for this file, else n-gram lookup."""
    has, why = hyflash_status(model.path, Path(model.path))
    if has:
        return True, "HyFlash", "A learned HyFlash drafter is installed for this model file"
    draft = draft_model_note(Path(model.path), None)
    if draft is not None:
        return False, *draft
    return False, "n-gram", f"{why} Speculative decoding uses n-gram lookup."


class _LocalRow:
    def __init__(self, model: LocalModel) -> None:
        self.model = model
        self.actions = QWidget()
        layout = QHBoxLayout(self.actions)
        layout.setContentsMargins(4, 2, 4, 2)
        self.use = QPushButton("Use this model")
        self.speedup = QPushButton("Speed up this model…")
        self.speedup.setToolTip("Train a HyFlash drafter for this model on this computer")
        self.remove = QPushButton("Remove from list")
        self.remove.setToolTip("Forget this file here; the file itself stays where it is")
        for button in (self.use, self.speedup, self.remove):
            layout.addWidget(button)
        layout.addStretch(1)
        self.cells: list[QTableWidgetItem] = []


class LocalModels(QWidget):
    useRequested = Signal(str)  # a file's path, the model's id
    speedupRequested = Signal(str, str)  # path, display name
    sourcesChanged = Signal(object, object)  # added files, folders: tuples of paths

    def __init__(
        self, settings: AppSettings | None = None, roots: Roots | None = None, parent=None
    ) -> None:
        super().__init__(parent)
        self.settings = settings or AppSettings()
        self.files = list(self.settings.model_files)
        self.folders = list(self.settings.model_folders)
        self.roots = roots  # None: this machine's (engine.models.discovery.default_roots)
        self.current: str | None = None
        self.rows: list[_LocalRow] = []
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 8, 0, 0)
        col.addLayout(self._build_header())
        self.table = make_table(COLUMNS)
        col.addWidget(self.table, 1)
        self.empty = QLabel(
            "No GGUF files found. Add a model file, drop one here, or add a folder that holds some."
        )
        self.empty.setObjectName("Muted")
        col.addWidget(self.empty)

    def _build_header(self) -> QHBoxLayout:
        head = QHBoxLayout()
        title = QLabel("On this computer")
        font = title.font()
        font.setBold(True)
        title.setFont(font)
        head.addWidget(title)
        note = QLabel(
            "GGUF files of LM Studio, Ollama, the Hugging Face cache, llama.cpp and your "
            "folders, used where they are (never copied)."
        )
        note.setObjectName("Muted")
        note.setWordWrap(True)
        head.addWidget(note, 1)
        self.add_button = QPushButton("Add model file…")
        self.add_button.clicked.connect(self.choose_files)
        self.folders_button = QPushButton("Models folders…")
        self.folders_button.clicked.connect(self.edit_folders)
        head.addWidget(self.add_button)
        head.addWidget(self.folders_button)
        return head

    # ----- the list ---------------------------------------------------------------------------

    def rescan(self, current: str | None = None) -> None:
        """Look again at every place and list what is there (refresh() fills in the rest);
        the model in use is listed wherever it lies (a path chosen in the settings file)."""
        self.current = current if current is not None else self.current
        extra = [self.current] if _is_file_id(self.current) else []
        self.table.setRowCount(0)
        self.rows = []
        for model in scan(self.roots, self.folders, [*self.files, *extra]):
            self._add_row(model)
        self.empty.setVisible(not self.rows)

    def _add_row(self, model: LocalModel) -> None:
        row = _LocalRow(model)
        r = self.table.rowCount()
        self.table.insertRow(r)
        ctx = model.context_length
        texts = (
            model.name,
            model.source,
            model.architecture or "?",
            model.quantization or "?",
            format_size(model.size_bytes),
            f"{ctx // 1024}K" if ctx >= 1024 else str(ctx or "?"),
            "",
            "",
        )
        for c, text in enumerate(texts):
            item = QTableWidgetItem(text)
            item.setToolTip(model.error or model.path)
            self.table.setItem(r, c, item)
            row.cells.append(item)
        if model.error is not None:
            for item in row.cells:
                item.setForeground(Qt.GlobalColor.red)
        self.table.setCellWidget(r, ACTIONS, row.actions)
        row.use.clicked.connect(lambda: self.useRequested.emit(model.path))
        row.speedup.clicked.connect(lambda: self.speedupRequested.emit(model.path, model.name))
        row.remove.clicked.connect(lambda: self.remove_file(model.path))
        self.rows.append(row)

    def refresh(self, current: str | None = None) -> None:
        """In use, runs here, drafter and the buttons again (after a choice or a speed-up)."""
        self.current = current if current is not None else self.current
        for row in self.rows:
            model = row.model
            in_use = same_file(model.path, self.current)
            font = row.cells[0].font()
            font.setBold(in_use)
            row.cells[0].setFont(font)
            runs, tip = runs_here(model, self.settings)
            row.cells[RUNS].setText(runs)
            row.cells[RUNS].setToolTip(tip)
            has_drafter = False
            if model.usable:
                has_drafter, text, tip = drafter_of(model)
                row.cells[DRAFTER].setText(text)
                row.cells[DRAFTER].setToolTip(tip)
            row.use.setVisible(model.usable and not in_use)
            row.speedup.setVisible(model.usable and not has_drafter)
            if model.usable and not has_drafter:
                resume = unfinished_job(model.path) is not None
                row.speedup.setText("Resume speed-up…" if resume else "Speed up this model…")
            row.remove.setVisible(model.source == ADDED and model.path in self.files)

    def row_of(self, path: str) -> _LocalRow | None:
        return next((row for row in self.rows if same_file(row.model.path, path)), None)

    def cell(self, path: str, column: str) -> str:
        """The text of `path`'s cell under `column` (a COLUMNS name), "" when it is not listed."""
        row = self.row_of(path)
        return row.cells[COLUMNS.index(column)].text() if row is not None else ""

    # ----- what is listed ---------------------------------------------------------------------

    def add_files(self, paths: list[str]) -> list[str]:
        """Remember these files (the ones not yet remembered) and list them; returns those."""
        new = [p for p in dict.fromkeys(paths) if p not in self.files]
        if new:
            self.files += new
            self._sources_changed()
        return new

    def remove_file(self, path: str) -> None:
        if path in self.files:
            self.files.remove(path)
            self._sources_changed()

    def set_folders(self, folders: tuple[str, ...]) -> None:
        if list(folders) != self.folders:
            self.folders = list(folders)
            self._sources_changed()

    def _sources_changed(self) -> None:
        self.sourcesChanged.emit(tuple(self.files), tuple(self.folders))
        self.rescan()
        self.refresh()

    def choose_files(self) -> None:
        paths, _filter = QFileDialog.getOpenFileNames(self, "Add model file", "", GGUF_FILTER)
        self.add_files(paths)

    def edit_folders(self) -> FoldersDialog:
        dialog = FoldersDialog(self.folders, self)
        dialog.accepted.connect(lambda: self.set_folders(dialog.folders()))
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog


def _is_file_id(model_id: str | None) -> bool:
    """A model id that names a GGUF file (Ollama's have no .gguf suffix), not a catalog entry."""
    return bool(model_id) and model_id not in load_catalog()


def make_table(columns: tuple[str, ...]) -> QTableWidget:
    """A read-only list of rows (no selection or editing), its first column stretched."""
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(list(columns))
    table.verticalHeader().setVisible(False)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    table.setShowGrid(False)
    table.setAlternatingRowColors(True)
    table.verticalHeader().setDefaultSectionSize(38)
    header = table.horizontalHeader()
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    for i in range(1, len(columns)):
        header.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
    return table
